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
from popagent_agent_runner.state.self_update import AttemptEnd, SelfUpdateAttemptStore
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, contained_path
from popagent_agent_runner.workspace import self_update as su
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound

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


# The most diff text one "show diff" answers.
MAX_DIFF_CHARS = 256 * 1024


class SelfUpdate:
    def __init__(
        self, workspaces: AgentWorkspaceStore, agents: AgentStore, attempts: SelfUpdateAttemptStore, root: Path
    ) -> None:
        self.workspaces = workspaces
        self.agents = agents
        self.attempts = attempts
        self.root = root

    async def _registered(self, workspace_id: str) -> Path:
        try:
            record = await self.workspaces.get(workspace_id)
        except NotFound:
            raise su.SelfUpdateRefused(f"the workspace {workspace_id!r} is not registered") from None
        try:
            return contained_path(self.root, record.path)[1]
        except InvalidArgument as exc:
            raise su.SelfUpdateRefused(str(exc)) from None

    async def diff(self, attempt_id: str) -> tuple[str, bool]:
        """The imported ref's change against the commit it was built on, and whether it was cut."""
        attempt = await self.attempts.get(attempt_id)
        if attempt.ref is None:
            raise FailedPrecondition(f"attempt {attempt_id} has no imported ref (status {attempt.status})")
        registered = await self._registered(attempt.workspace_id)
        try:
            text = await asyncio.to_thread(su.ref_diff, registered, attempt_id, attempt.base_commit)
        except su.SelfUpdateRefused as exc:
            raise FailedPrecondition(str(exc)) from None
        return text[:MAX_DIFF_CHARS], len(text) > MAX_DIFF_CHARS

    async def delete_ref(self, attempt_id: str) -> None:
        """Remove the attempt's imported ref from the registered repository (nothing else changes)."""
        attempt = await self.attempts.get(attempt_id)
        if attempt.ref is None:
            raise FailedPrecondition(f"attempt {attempt_id} has no imported ref")
        registered = await self._registered(attempt.workspace_id)
        try:
            await asyncio.to_thread(su.delete_ref, registered, attempt_id)
        except su.SelfUpdateRefused as exc:
            raise FailedPrecondition(str(exc)) from None
        await self.attempts.clear_ref(attempt_id)

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
        attempt_id = su.check_id(f"{task_id}-{attempt}")
        clone_relative = f"{CLONES_FOLDER}/{attempt_id}"
        clone = self.root / CLONES_FOLDER / attempt_id
        await self.attempts.start(attempt_id, task_id, attempt, workspace_id)
        try:
            registered = await self._registered(workspace_id)
            async with stages.stage("capture"):
                captured = await asyncio.to_thread(su.capture, registered)
            async with stages.stage("clone"):
                branch = await asyncio.to_thread(su.prepare_clone, registered, clone, attempt_id, captured)
                clone_remotes = await asyncio.to_thread(su.clone_remotes_digest, clone)
        except su.SelfUpdateRefused as exc:
            await asyncio.to_thread(su.remove_clone, clone)
            await self.attempts.finish(attempt_id, AttemptEnd("refused", [], str(exc), stages=tuple(stages.seconds)))
            raise
        await self.attempts.prepared(attempt_id, captured.head, captured.branch, branch)
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
        """Verify and import after the turn; the clone is removed and the attempt recorded in every case."""
        end = AttemptEnd("failed", [], "the attempt ended before verification")
        try:
            concluded, end = await self._conclude(prepared, turn_ok, progress)
            return concluded
        finally:
            await asyncio.to_thread(su.remove_clone, prepared.clone)
            progress(f"stages: {prepared.stages.line()}"[:200])
            end = dataclasses.replace(
                end, delegations=list(prepared.containment.delegations), stages=tuple(prepared.stages.seconds)
            )
            await self.attempts.finish(prepared.attempt_id, end)

    async def _conclude(
        self, prepared: Prepared, turn_ok: bool, progress: Callable[[str], None]
    ) -> tuple[Concluded, AttemptEnd]:
        try:
            if not turn_ok:
                reason = "the turn did not complete; nothing was imported"
                return Concluded(False, reason), AttemptEnd("failed", [], reason)
            for agent_id in (IMPLEMENTER, REVIEWER):
                if not prepared.containment.succeeded(agent_id):
                    reason = f"no successful {agent_id} delegation; nothing was imported"
                    return Concluded(False, reason), AttemptEnd("refused", [], reason)
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
                reason = f"self-update: no change needed (HEAD {prepared.captured.head[:12]})"
                return Concluded(True, reason), AttemptEnd(
                    "no-op", [], "verified: a clean no-op", commit=verified.commit
                )
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
            concluded = Concluded(
                True,
                f"self-update: imported {ref} = {verified.commit} on top of {prepared.captured.head} "
                f"({prepared.captured.branch})\n{verified.diff_stat}",
            )
            return concluded, AttemptEnd(
                "imported",
                [],
                "verified: a clean descendant of the captured HEAD, remotes unchanged, every path allowed",
                changed_paths=verified.changed_paths,
                diff_stat=verified.diff_stat,
                commit=verified.commit,
                ref=ref,
            )
        except su.SelfUpdateRefused as exc:
            return Concluded(False, f"self-update refused: {exc}"), AttemptEnd("refused", [], str(exc))
