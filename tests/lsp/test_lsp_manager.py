"""The language-server manager's life cycle, with real servers: shared starts, crashes, idling, the bound.

Each test has a `LanguageServers` of its own (so it counts its own starts) on the module's
fixture repository; servers are real processes, checked with psutil.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from lsp import fixture_repo
from popagent_agent_runner.lsp.inspection import Inspection, Inspector
from popagent_agent_runner.lsp.languages import Language, LanguageServerUnavailable, ServerCatalog, ServerCommand
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.workspace.paths import Repository
from support.waiting import eventually


def gone(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_concurrent_calls_of_two_agents_start_one_server(repo: Repository) -> None:
    servers = LanguageServers(request_timeout_s=45.0)
    try:
        supervisor = Inspector(servers, fixture_repo.WORKSPACE, repo)
        researcher = Inspector(servers, fixture_repo.WORKSPACE, repo)
        hover, references = await asyncio.gather(
            supervisor.run(Inspection("hover", *fixture_repo.PY_CALL)),
            researcher.run(Inspection("references", **fixture_repo.PY_DEFINITION)),
        )
        assert "def greet(" in hover["hover"]
        assert references["total"] == 4
        assert servers.started == 1
        [server] = servers.running()
        assert (server.workspace_id, server.language) == (fixture_repo.WORKSPACE, "python")

        # A killed server is noticed at the next call, which starts a new one and answers.
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        await eventually(lambda: gone(server.pid), what="the killed server to exit")
        again = await supervisor.run(Inspection("definition", *fixture_repo.PY_CALL))
        assert again["locations"][0]["path"] == "pkg/util.py"
        [restarted] = servers.running()
        assert restarted.pid != server.pid
        assert servers.started == 2
    finally:
        await servers.close()
    assert gone(restarted.pid)


async def test_an_idle_server_is_shut_down(repo: Repository) -> None:
    """(The next call starts a server again, as after a crash: the same start as the first.)"""
    servers = LanguageServers(idle_timeout_s=0.5, request_timeout_s=45.0)
    try:
        await Inspector(servers, fixture_repo.WORKSPACE, repo).run(Inspection("hover", *fixture_repo.PY_CALL))
        [server] = servers.running()
        await eventually(servers.running, until=lambda running: running == [], what="the idle server to stop")
        await eventually(lambda: gone(server.pid), what="the idle server's process to exit")
    finally:
        await servers.close()


async def test_the_bound_stops_the_least_recently_used_and_close_kills_every_server(repo: Repository) -> None:
    servers = LanguageServers(max_servers=1, request_timeout_s=45.0)
    inspector = Inspector(servers, fixture_repo.WORKSPACE, repo)
    try:
        await inspector.run(Inspection("hover", *fixture_repo.PY_CALL))
        [python] = servers.running()
        # One more server than the bound: the idle one makes room.
        await inspector.run(Inspection("hover", *fixture_repo.TS_CALL))
        [typescript] = servers.running()
        assert (python.language, typescript.language) == ("python", "typescript")
        await eventually(lambda: gone(python.pid), what="the stopped server's process to exit")
        assert typescript.pid is not None
        # typescript-language-server runs tsserver as its child.
        children = [child.pid for child in psutil.Process(typescript.pid).children(recursive=True)]
        assert children
    finally:
        await servers.close()
    # Every server and what it started is gone with the service (SIGKILL to its process group
    # takes effect as the kernel gets to it); none starts after.
    assert gone(typescript.pid)
    await eventually(lambda: all(gone(pid) for pid in children), within=5, what="tsserver to be gone")
    with pytest.raises(LanguageServerUnavailable, match="stopping"):
        await inspector.run(Inspection("hover", *fixture_repo.PY_CALL))


@dataclass(frozen=True)
class ExitingCatalog(ServerCatalog):
    """Starts node with a script that exits at once, as a broken server install does."""

    def command(self, language: Language) -> ServerCommand:
        real = super().command(language)
        return ServerCommand(real.program, ("-e", "console.error('cannot load the server'); process.exit(3)"))


async def test_a_server_that_cannot_start_is_a_clear_error(repo: Repository, tmp_path: Path) -> None:
    missing = LanguageServers(ServerCatalog(tmp_path / "no-servers"))
    try:
        with pytest.raises(LanguageServerUnavailable, match=r"typescript-language-server is not installed"):
            await Inspector(missing, fixture_repo.WORKSPACE, repo).run(Inspection("hover", *fixture_repo.TS_CALL))
    finally:
        await missing.close()

    exiting = LanguageServers(ExitingCatalog(), request_timeout_s=20.0)
    try:
        with pytest.raises(LanguageServerUnavailable) as failed:
            await Inspector(exiting, fixture_repo.WORKSPACE, repo).run(Inspection("hover", *fixture_repo.PY_CALL))
        message = str(failed.value)
        assert "exited (code 3)" in message and "cannot load the server" in message and "failed to start" in message
        assert exiting.running() == []
    finally:
        await exiting.close()
