"""deploy/seccomp-agent-runner.json, the seccomp filter compose gives agent-runner instead of none,
lets the workspace shell's bubblewrap build its sandbox and still refuses what it denies.

The profile is compiled with libseccomp (what Docker does with it) and loaded into a child
process, where it holds for everything that process starts, as in the container; the child
then runs a command through `Sandbox`, exactly as agent-runner does. The same child without
the filter is the control: the denied call must succeed there, so the check can tell them apart.
"""

from __future__ import annotations

import ctypes.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILE = REPO_ROOT / "deploy" / "seccomp-agent-runner.json"
SOURCE = REPO_ROOT / "services" / "agent-runner" / "src"

# Runs with this interpreter, which has popagent_core installed; `sandbox.py` needs nothing else outside
# the standard library.
CHILD = r"""
import asyncio, ctypes, json, os, sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from popagent_agent_runner.workspace.sandbox import Sandbox

SCMP_ACT_ALLOW = 0x7FFF0000


def action(name, errno_ret):
    if name == "SCMP_ACT_ALLOW":
        return SCMP_ACT_ALLOW
    if name == "SCMP_ACT_ERRNO":
        return 0x00050000 | (errno_ret & 0xFFFF)
    sys.exit(f"profile action {name} is not modelled by this test")


def load(path):
    profile = json.loads(Path(path).read_text())
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(action(profile["defaultAction"], profile.get("defaultErrnoRet", 1)))
    for rule in profile["syscalls"]:
        extra = set(rule) - {"names", "action", "errnoRet", "comment"}
        if extra:
            sys.exit(f"profile rule fields {sorted(extra)} are not modelled by this test")
        rule_action = action(rule["action"], rule.get("errnoRet", 1))
        for name in rule["names"]:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number == -1:  # not a system call libseccomp knows; Docker skips those too
                continue
            if lib.seccomp_rule_add(ctx, rule_action, number, 0) != 0:
                sys.exit(f"libseccomp refused the rule for {name}")
    if lib.seccomp_load(ctx) != 0:
        sys.exit("libseccomp could not load the filter")


# PTRACE_TRACEME: allowed without the filter, denied by the profile (`ptrace`).
COMMAND = (
    "echo made > made.txt && "
    "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())'"
)


async def main():
    if sys.argv[3] == "profile":
        load(sys.argv[4])
    box = Sandbox(max_processes=64)
    reason = await box.probe()
    repo = Path(sys.argv[2])
    result = await box.run(os.open(repo, os.O_RDONLY), repo, repo, COMMAND, 30) if reason is None else None
    print(json.dumps({
        "reason": reason,
        "exitCode": result.exit_code if result else None,
        "output": result.output if result else "",
        "made": (repo / "made.txt").is_file(),
    }))


asyncio.run(main())
"""


def run_child(repo: Path, *mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(SOURCE), str(repo), *mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_compose_gives_agent_runner_this_profile_not_unconfined() -> None:
    compose = yaml.safe_load((REPO_ROOT / "deploy" / "compose.yaml").read_text())
    options = compose["services"]["agent-runner"]["security_opt"]
    assert "seccomp=./seccomp-agent-runner.json" in options
    assert not any(option.replace(":", "=") == "seccomp=unconfined" for option in options)
    for name, service in compose["services"].items():
        assert "seccomp=unconfined" not in [o.replace(":", "=") for o in service.get("security_opt", [])], name


def test_bubblewrap_works_under_the_profile_and_what_it_denies_stays_denied(tmp_path: Path) -> None:
    # Both come from `make setup` (deploy/install-system-deps.sh): missing, the set-up is broken.
    assert shutil.which("bwrap") is not None, "bubblewrap is not installed (make setup installs it)"
    assert ctypes.util.find_library("seccomp") is not None, "libseccomp2 is not installed (make setup installs it)"
    control_repo, filtered_repo = tmp_path / "control", tmp_path / "filtered"
    control_repo.mkdir()
    filtered_repo.mkdir()

    control = run_child(control_repo, "none")
    assert (control["reason"], control["exitCode"], control["made"]) == (None, 0, True), control
    assert str(control["output"]).split() == ["0", "0"], control

    filtered = run_child(filtered_repo, "profile", str(PROFILE))
    assert filtered["reason"] is None, f"the sandbox does not start under the profile: {filtered}"
    assert (filtered["exitCode"], filtered["made"]) == (0, True), filtered
    assert str(filtered["output"]).split() == ["-1", "1"], f"ptrace was not refused with EPERM: {filtered}"
