"""The self-update scheduler: one `source='self-update'` schedule per eligible workspace.

Desired state comes from the autonomy settings (evolution: global and self-update policy, the
cadence) and from the agents' state and each repository (agent-runner's
`GetSelfUpdateEligibility`). `SelfUpdateScheduler.reconcile` makes the system rows exactly that
in one transaction under an advisory lock, so reconcilers on every replica run one after another;
the partial unique index `popagent_agent_schedules_self_update_slot` owns each workspace's slot.
Start, stop and the reconcile loop share one lock: a stop asked for during the first reconcile
keeps the loop from starting, and a later start begins again.

Materialization rereads the policy (`policy_allows`) while the schedule row is locked
(`TaskRepo.materialize_due`), so turning self-update off blocks new work at once, before the
next reconcile removes the schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from popagent.agent_runner.v1 import agent_runner_pb2, agent_runner_pb2_grpc
from popagent.evolution.v1 import evolution_pb2, evolution_pb2_grpc
from popagent_core.errors import InvalidArgument
from popagent_core.grpc_client import map_rpc_errors, open_channel
from popagent_core.lifecycle import wait_event
from popagent_tasks.model import Schedule, SelfUpdateSlot
from popagent_tasks.repo import TaskRepo
from popagent_tasks.schedules import next_run, validate_cron

logger = logging.getLogger(__name__)

SCHEDULE_NAME = "Self-update"
# Every attempt of the run starts from a fresh clone; transient failures retry up to this.
MAX_ATTEMPTS = 3
CALL_TIMEOUT_S = 10.0
# What the supervisor is asked; the runtime policy, not this text, is what contains the work.
PROMPT = (
    "Contained self-update of this repository. Find one small, safe improvement (a bug fix, a "
    "missing test, a clearer error) and make it: delegate the change to the implementer with the "
    "exact files and the test command to run, then delegate an independent review of the change "
    "to the reviewer. You work in a local clone without remotes or network; the runtime commits "
    "the reviewed change on its own branch. If nothing is worth changing, say so and change nothing."
)


@dataclass(frozen=True)
class SelfUpdatePlan:
    """What the schedules should be: empty `workspaces` when self-update may not run."""

    cron: str
    workspaces: tuple[str, ...]
    # Why nothing (or not every workspace) is scheduled, for the log and the Autonomy page.
    reasons: tuple[str, ...] = ()


PlanSource = Callable[[], Awaitable[SelfUpdatePlan]]
PolicyCheck = Callable[[], Awaitable[bool]]


def plan_of(
    autonomy: evolution_pb2.AutonomySettings, eligibility: agent_runner_pb2.SelfUpdateEligibility
) -> SelfUpdatePlan:
    """The plan from the autonomy settings and the agents' state: every precondition of the spec."""
    reasons: list[str] = []
    if not autonomy.evolution_enabled:
        reasons.append("evolution is off")
    if not autonomy.self_update_enabled:
        reasons.append("self-update is off")
    cron = ""
    try:
        cron = validate_cron(autonomy.self_update_cron)
    except InvalidArgument as exc:
        reasons.append(str(exc))
    if eligibility.agents_problem:
        reasons.append(eligibility.agents_problem)
    if reasons:
        return SelfUpdatePlan(cron, (), tuple(reasons))
    eligible = []
    for workspace in eligibility.workspaces:
        if workspace.problem:
            reasons.append(f"{workspace.workspace_id}: {workspace.problem}")
        else:
            eligible.append(workspace.workspace_id)
    return SelfUpdatePlan(cron, tuple(sorted(eligible)), tuple(reasons))


class GrpcPlanSource:
    """The plan from evolution (autonomy settings) and agent-runner (agents and repositories)."""

    def __init__(self, evolution_address: str, agent_runner_address: str, token: str) -> None:
        self.evolution_address = evolution_address
        self.agent_runner_address = agent_runner_address
        self.token = token

    async def autonomy(self) -> evolution_pb2.AutonomySettings:
        async with open_channel(self.evolution_address, self.token) as channel:
            with map_rpc_errors():
                return await evolution_pb2_grpc.EvolutionServiceStub(channel).GetAutonomySettings(
                    evolution_pb2.GetAutonomySettingsRequest(), timeout=CALL_TIMEOUT_S
                )

    async def plan(self) -> SelfUpdatePlan:
        autonomy = await self.autonomy()
        async with open_channel(self.agent_runner_address, self.token) as channel:
            with map_rpc_errors():
                eligibility = await agent_runner_pb2_grpc.AgentRunnerTaskServiceStub(channel).GetSelfUpdateEligibility(
                    agent_runner_pb2.GetSelfUpdateEligibilityRequest(), timeout=CALL_TIMEOUT_S
                )
        return plan_of(autonomy, eligibility)

    async def allows(self) -> bool:
        """Whether the policy lets self-update run now; an unreachable evolution service says no."""
        try:
            autonomy = await self.autonomy()
        except Exception:
            logger.warning("autonomy settings unreadable; self-update ticks are skipped", exc_info=True)
            return False
        return autonomy.evolution_enabled and autonomy.self_update_enabled


class SelfUpdateScheduler:
    def __init__(self, repo: TaskRepo, plan: PlanSource, timezone: str, *, interval_s: float = 30.0) -> None:
        self.repo = repo
        self.plan = plan
        self.timezone = timezone
        self.interval_s = interval_s
        self.last_plan: SelfUpdatePlan | None = None
        self._lifecycle = asyncio.Lock()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._wake = asyncio.Event()

    async def reconcile(self) -> list[Schedule]:
        """Create, update or remove the system schedules to match the current plan."""
        plan = await self.plan()
        now = datetime.now(UTC)
        slots = [
            SelfUpdateSlot(
                workspace_id=workspace_id,
                name=SCHEDULE_NAME,
                prompt=PROMPT,
                cron=plan.cron,
                next_run_at=next_run(plan.cron, self.timezone, now),
                max_attempts=MAX_ATTEMPTS,
            )
            for workspace_id in plan.workspaces
        ]
        kept = await self.repo.reconcile_self_update(slots, self.timezone)
        if plan != self.last_plan:
            logger.info(
                "self-update schedules reconciled",
                extra={"workspaces": list(plan.workspaces), "reasons": list(plan.reasons)},
            )
        self.last_plan = plan
        return kept

    def wake(self) -> None:
        """The settings or the agents changed: reconcile now rather than at the next interval."""
        self._wake.set()

    async def start(self) -> None:
        async with self._lifecycle:
            if self._loop is not None:
                return
            self._stopping = False
            try:
                await self.reconcile()
            except Exception:
                logger.warning("first self-update reconcile failed; the loop retries", exc_info=True)
            if self._stopping:
                return
            self._loop = asyncio.create_task(self._run(), name="tasks-self-update-scheduler")

    async def stop(self) -> None:
        self._stopping = True
        async with self._lifecycle:
            loop, self._loop = self._loop, None
            if loop is not None:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, self.interval_s)
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:
                logger.warning("self-update reconcile failed; retrying", exc_info=True)
