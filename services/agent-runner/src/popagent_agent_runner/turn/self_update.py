"""A contained self-update attempt around a task turn (docs/self-update.md).

`SelfUpdate.eligibility` answers the tasks service's scheduler. `SelfUpdate.attempt` wraps one
attempt: capture the registered checkout (clean, HEAD, branch, remotes), prepare a fresh local clone
without remotes on `autonomous/self-update/<task>-<attempt>` under the workspace root, let the turn
work there under the fixed policy (`context/containment.py`; reviewer read-only, tools removed),
then commit, verify and import the commit as `refs/popagent/self-update/<task>-<attempt>`. The clone
is removed however the attempt ends. Each stage's duration goes to the progress lines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from popagent_agent_runner.context.containment import (
    IMPLEMENTER,
    REMOVED_TOOLS,
    REVIEWER,
    SUPERVISOR,
    Containment,
    protected_path,
)
from popagent_agent_runner.memory.threads import TurnState
from popagent_agent_runner.state.agents import AgentStore
from popagent_agent_runner.state.profiles import AgentProfile
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, contained_path
from popagent_agent_runner.workspace import self_update as su
from popagent_core.errors import InvalidArgument, NotFound

logger = logging.getLogger(__name__)

# The clones live under the workspace root (the turn's hands open only paths there), in a folder no
# registration may name.
CLONES_FOLDER = ".popagent-self-update"


@dataclass(frozen=True)
class WorkspaceEligibility:
    workspace_id: str
    problem: str


def agents_problem(agents: dict[str, tuple[str, bool]]) -> str:
    """Why the agents' state does not allow self-update ('' : it does). `agents`: id -> (workspace
    access, delegation eligible)."""
    problems = []
    for agent_id, need in ((SUPERVISOR, "read-write"), (IMPLEMENTER, "read-write")):
        access = agents.get(agent_id, ("none", False))[0]
        if access != need:
            problems.append(f"{agent_id} needs read-write workspace access (has {access})")
    for agent_id in (IMPLEMENTER, REVIEWER):
        if not agents.get(agent_id, ("none", False))[1]:
            problems.append(f"{agent_id} must be delegation-eligible")
    if agents.get(REVIEWER, ("none", False))[0] == "none":
        problems.append("reviewer needs repository access")
    return "; ".join(problems)


def repository_problem(path: Path) -> str:
    if not (path / ".git").is_dir():
        return "not a Git repository (a .git folder is needed)"
    if not os.access(path / ".git", os.W_OK) or not os.access(path / ".git" / "refs", os.W_OK):
        return "its .git folder is not writable"
    return ""


@dataclass
class Stages:
    """How long each stage of one attempt took (seconds), in order."""

    seconds: list[tuple[str, float]] = field(default_factory=list[tuple[str, float]])

    @asynccontextmanager
    async def stage(self, name: str) -> AsyncIterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds.append((name, time.perf_counter() - started))

    def line(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in self.seconds)


@dataclass
class Prepared:
    registered: Path
    clone: Path
    clone_relative: str
    attempt_id: str
    branch: str
    captured: su.Captured
    clone_remotes: str
    containment: Containment
    stages: Stages


@dataclass(frozen=True)
class Concluded:
    ok: bool
    message: str


def contained_profiles(profiles: dict[str, AgentProfile]) -> dict[str, AgentProfile]:
    """The attempt's profiles: no removed tool, no browser, the reviewer read-only."""
    contained: dict[str, AgentProfile] = {}
    for agent_id, profile in profiles.items():
        access = profile.workspace_access
        if agent_id == REVIEWER and access == "read-write":
            access = "read-only"
        contained[agent_id] = dataclasses.replace(
            profile,
            tools=tuple(tool for tool in profile.tools if tool not in REMOVED_TOOLS),
            browser_access="none",
            workspace_access=access,
        )
    return contained


class SelfUpdate:
    def __init__(self, workspaces: AgentWorkspaceStore, agents: AgentStore, root: Path) -> None:
        self.workspaces = workspaces
        self.agents = agents
        self.root = root

    async def eligibility(self) -> tuple[str, list[WorkspaceEligibility]]:
        agents = {agent.id: (agent.workspace_access, agent.delegation_eligible) for agent in await self.agents.list()}
        found = []
        for workspace in await self.workspaces.list():
            try:
                _, real = contained_path(self.root, workspace.path)
                problem = await asyncio.to_thread(repository_problem, real)
            except InvalidArgument as exc:
                problem = str(exc)
            found.append(WorkspaceEligibility(workspace.id, problem))
        return agents_problem(agents), found

    async def prepare(self, workspace_id: str, task_id: str, attempt: int) -> Prepared:
        """Capture the registered checkout and make this attempt's clone; SelfUpdateRefused: why not."""
        stages = Stages()
        try:
            record = await self.workspaces.get(workspace_id)
        except NotFound:
            raise su.SelfUpdateRefused(f"the workspace {workspace_id!r} is not registered") from None
        try:
            _, registered = contained_path(self.root, record.path)
        except InvalidArgument as exc:
            raise su.SelfUpdateRefused(str(exc)) from None
        attempt_id = su.check_id(f"{task_id}-{attempt}")
        clone_relative = f"{CLONES_FOLDER}/{attempt_id}"
        clone = self.root / CLONES_FOLDER / attempt_id
        async with stages.stage("capture"):
            captured = await asyncio.to_thread(su.capture, registered)
        async with stages.stage("clone"):
            branch = await asyncio.to_thread(su.prepare_clone, registered, clone, attempt_id, captured)
            clone_remotes = await asyncio.to_thread(su.clone_remotes_digest, clone)
        return Prepared(
            registered,
            clone,
            clone_relative,
            attempt_id,
            branch,
            captured,
            clone_remotes,
            Containment(frozenset(captured.commands)),
            stages,
        )

    def contain(self, prepared: Prepared, state: TurnState) -> TurnState:
        """The turn's state pointed at the clone, with the attempt's profiles."""
        return dataclasses.replace(
            state, workspace_path=prepared.clone_relative, profiles=contained_profiles(state.profiles)
        )

    async def conclude(self, prepared: Prepared, turn_ok: bool, progress: Callable[[str], None]) -> Concluded:
        """Verify and import after the turn; the clone is removed in every case."""
        try:
            if not turn_ok:
                return Concluded(False, "the turn did not complete; nothing was imported")
            for agent_id in (IMPLEMENTER, REVIEWER):
                if not prepared.containment.succeeded(agent_id):
                    return Concluded(False, f"no successful {agent_id} delegation; nothing was imported")
            async with prepared.stages.stage("commit"):
                await asyncio.to_thread(
                    su.commit_work,
                    prepared.clone,
                    f"popagent self-update {prepared.attempt_id}\n\nReviewed by the reviewer agent.",
                )
            async with prepared.stages.stage("verify"):
                verified = await asyncio.to_thread(
                    su.verify,
                    prepared.registered,
                    prepared.clone,
                    prepared.branch,
                    prepared.captured,
                    prepared.clone_remotes,
                    protected_path,
                )
            progress(f"verified: {'no change' if verified.no_op else ', '.join(verified.changed_paths)[:180]}")
            if verified.no_op:
                return Concluded(True, f"self-update: no change needed (HEAD {prepared.captured.head[:12]})")
            async with prepared.stages.stage("import"):
                ref = await asyncio.to_thread(
                    su.import_ref,
                    prepared.registered,
                    prepared.clone,
                    prepared.branch,
                    prepared.attempt_id,
                    verified.commit,
                )
            progress(f"imported: {ref}")
            return Concluded(
                True,
                f"self-update: imported {ref} = {verified.commit} on top of {prepared.captured.head} "
                f"({prepared.captured.branch})\n{verified.diff_stat}",
            )
        except su.SelfUpdateRefused as exc:
            return Concluded(False, f"self-update refused: {exc}")
        finally:
            await asyncio.to_thread(su.remove_clone, prepared.clone)
            progress(f"stages: {prepared.stages.line()}"[:200])
