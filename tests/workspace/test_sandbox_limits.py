"""Issue 41, finding 2: a sandboxed command has a memory limit, and a workspace a disk budget.

Each limit is checked both ways in the real sandbox: a command within it runs, one past it is
stopped, and the host's side (the repository's folder) holds at most what the budget allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent_agent_runner.servicers.state import AgentRunnerStateServicer
from popagent_agent_runner.workspace import sandbox as sandboxes
from popagent_agent_runner.workspace.disk_budget import MIB, DiskBudget, used_bytes
from popagent_agent_runner.workspace.paths import WorkspaceRefusal
from popagent_agent_runner.workspace.sandbox import Sandbox
from workspace.sandboxing import held, run

pytestmark = pytest.mark.timeout(60)

# Allocates and touches `n` MiB (a bytes object is written as it is made), then says so.
ALLOCATE = 'python -c \'import sys; b = b"x" * ({n} << 20); print("allocated", len(b) >> 20)\''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "README.md").write_text("hello\n")
    return folder


async def limited(*, memory_mb: int | None = None, disk_mb: float | None = None) -> Sandbox:
    box = Sandbox(
        max_processes=64,
        memory_bytes=memory_mb * MIB if memory_mb is not None else None,
        disk_budget=DiskBudget(int(disk_mb * MIB) if disk_mb is not None else None),
    )
    reason = await box.probe()
    assert reason is None, f"bubblewrap does not work here: {reason}"
    return box


def without_cgroups(box: Sandbox) -> Sandbox:
    """The same sandbox as on a machine where this process can make no cgroup."""
    cgroups = sandboxes._CommandCgroups.__new__(sandboxes._CommandCgroups)
    cgroups.base = cgroups.memory_base = None
    box._cgroups = cgroups
    return box


async def test_a_command_past_its_memory_limit_is_stopped_and_one_within_it_runs(repo: Path) -> None:
    box = await limited(memory_mb=96)
    within = await run(box, repo, ALLOCATE.format(n=16), 30)
    assert within.exit_code == 0 and "allocated 16" in within.output, within
    past = await run(box, repo, ALLOCATE.format(n=512), 30)
    assert past.exit_code != 0 and "allocated" not in past.output, past
    cgroups = await box.cgroups()
    if cgroups.base is not None and cgroups.memory_base is not None:
        # The kernel's OOM killer stopped it inside its group, and the result says why.
        assert past.memory_exceeded, past
    else:
        assert "MemoryError" in past.output, past


async def test_without_a_memory_cgroup_the_address_space_is_bounded(repo: Path) -> None:
    box = without_cgroups(await limited(memory_mb=96))
    within = await run(box, repo, ALLOCATE.format(n=16), 30)
    assert within.exit_code == 0 and "allocated 16" in within.output, within
    past = await run(box, repo, ALLOCATE.format(n=512), 30)
    assert past.exit_code == 1 and "MemoryError" in past.output and not past.memory_exceeded, past


async def test_no_file_a_command_writes_grows_past_the_room_left(repo: Path) -> None:
    box = await limited(disk_mb=8)
    small = await run(box, repo, "head -c 1048576 /dev/zero > small && echo wrote", 30)
    assert small.exit_code == 0 and "wrote" in small.output, small
    big = await run(box, repo, "head -c 33554432 /dev/zero > big && echo wrote", 30)
    assert big.exit_code != 0 and "wrote" not in big.output, big
    assert (repo / "big").stat().st_size <= 8 * MIB - (repo / "small").stat().st_size
    with held(repo) as root_fd:
        assert used_bytes(root_fd) <= 8 * MIB + 64 * 1024  # the folders' own blocks


async def test_a_command_that_fills_the_budget_with_many_files_is_killed(repo: Path) -> None:
    box = await limited(disk_mb=16)
    # Each file is under the room left; together they pass the budget within a few watch rounds.
    command = "i=0; while [ $i -lt 400 ]; do head -c 524288 /dev/zero > f$i; i=$((i+1)); sleep 0.02; done; echo done"
    result = await run(box, repo, command, 45)
    assert result.disk_budget_exceeded and result.killed and "done" not in result.output, result
    with held(repo) as root_fd:
        used = used_bytes(root_fd)
    # Killed after at most a couple of watch intervals of writing (0.5 MiB per 20 ms at most).
    assert 16 * MIB < used < 64 * MIB, used


async def test_a_workspace_over_its_budget_lets_files_be_removed_and_then_grows_again(repo: Path) -> None:
    (repo / "ballast").write_bytes(b"x" * (3 * MIB))
    box = await limited(disk_mb=2)
    grow = await run(box, repo, "echo more >> README.md && echo grew", 30)
    assert grow.exit_code != 0 and "grew" not in grow.output and grow.disk_full, grow
    assert not grow.disk_budget_exceeded  # not killed: it could not grow anything
    assert (repo / "README.md").read_text() == "hello\n"
    removed = await run(box, repo, "rm ballast && echo removed", 30)
    assert removed.exit_code == 0 and "removed" in removed.output and removed.disk_full, removed
    again = await run(box, repo, "echo more >> README.md && echo grew", 30)
    assert again.exit_code == 0 and not again.disk_full, again
    assert (repo / "README.md").read_text() == "hello\nmore\n"


async def test_the_file_tools_budget_refuses_a_write_that_would_pass_it(repo: Path) -> None:
    budget = DiskBudget(1 * MIB)
    with held(repo) as root_fd:
        await budget.make_room(root_fd, str(repo), 512 * 1024)
        (repo / "half").write_bytes(b"x" * (512 * 1024))  # what the tool then wrote
        with pytest.raises(WorkspaceRefusal, match=r"the workspace is at its disk budget \(.* of 1 MiB\)"):
            await budget.make_room(root_fd, str(repo), 600 * 1024)
        await budget.make_room(root_fd, str(repo), 100 * 1024)
    assert await DiskBudget(None).room(0, "unused") is None


async def test_the_sandbox_status_says_what_bounds_a_command_here() -> None:
    servicer = AgentRunnerStateServicer.__new__(AgentRunnerStateServicer)
    servicer.sandbox = await limited(memory_mb=2048, disk_mb=10240)
    status = await servicer.GetSandboxStatus(arpb.GetSandboxStatusRequest(), None)  # type: ignore[arg-type]
    cgroups = await servicer.sandbox.cgroups()
    mechanism = "memory cgroup" if cgroups.base is not None and cgroups.memory_base is not None else "RLIMIT_AS"
    assert status.available and status.limits == (
        f"processes ≤ 64 ({'pids cgroup' if cgroups.base is not None else 'RLIMIT_NPROC, which binds no root service'}); "
        f"memory ≤ 2048 MiB a command ({mechanism}{', address space' if mechanism == 'RLIMIT_AS' else ''}); "
        "workspace disk ≤ 10240 MiB (RLIMIT_FSIZE and a watch while commands run)"
    ), status.limits
    servicer.sandbox = without_cgroups(await limited(memory_mb=128))
    status = await servicer.GetSandboxStatus(arpb.GetSandboxStatusRequest(), None)  # type: ignore[arg-type]
    assert status.limits == (
        "processes ≤ 64 (RLIMIT_NPROC, which binds no root service); "
        "memory ≤ 128 MiB a command (RLIMIT_AS, address space); workspace disk unbounded"
    )
