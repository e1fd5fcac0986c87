"""The default workspace checkout: cloned when absent, one clear line when it cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from popagent_agent_runner.workspace.checkout import ensure_default_checkout


def git_repository(folder: Path) -> Path:
    folder.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    (folder / "README.md").write_text("popagent\n")
    for args in (
        ["init", "-q"],
        ["add", "README.md"],
        ["-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "init"],
    ):
        subprocess.run(["git", *args], cwd=folder, check=True, env=env)
    return folder


def test_an_absent_checkout_is_cloned_once(tmp_path: Path) -> None:
    source = git_repository(tmp_path / "source")
    root = tmp_path / "workspace"
    line = ensure_default_checkout(root, str(source))
    assert line == f"default workspace cloned from {source} into {root / 'popagent'}"
    assert (root / "popagent" / "README.md").read_text() == "popagent\n"
    assert (root / "popagent" / ".git").is_dir()
    assert ensure_default_checkout(root, str(source)) == f"default workspace present: {root / 'popagent'}"
    assert sorted(p.name for p in root.iterdir()) == ["popagent"]  # no staging folder left


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the source repository to another uid needs root")
def test_a_source_owned_by_another_user_is_cloned(tmp_path: Path) -> None:
    # As in compose: the host's checkout mounted into a container whose user does not own it.
    source = git_repository(tmp_path / "source")
    for path in (source, *source.rglob("*")):
        os.chown(path, 10001, 10001, follow_symlinks=False)
    root = tmp_path / "workspace"
    line = ensure_default_checkout(root, str(source))
    assert line == f"default workspace cloned from {source} into {root / 'popagent'}"
    assert (root / "popagent" / "README.md").read_text() == "popagent\n"


def test_a_failed_clone_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    line = ensure_default_checkout(root, str(tmp_path / "no-such-repository"))
    assert line.startswith(f"default workspace not cloned from {tmp_path / 'no-such-repository'}: ")
    assert "\n" not in line
    assert not (root / "popagent").exists() and list(root.iterdir()) == []
    assert "POPAGENT_DEFAULT_WORKSPACE_SOURCE is not set" in ensure_default_checkout(root, "")


def test_the_entrypoint_never_fails(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "POPAGENT_WORKSPACE_ROOT": str(tmp_path / "workspace"),
        "POPAGENT_DEFAULT_WORKSPACE_SOURCE": "https://127.0.0.1:9/nothing.git",
    }
    done = subprocess.run(
        [sys.executable, "-m", "popagent_agent_runner.workspace.checkout"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("default workspace not cloned from https://127.0.0.1:9/nothing.git: ")
