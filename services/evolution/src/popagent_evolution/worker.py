"""The periodic evolution worker: recover abandoned claims, claim due signals, learn from them
(and, once an hour, delete outcomes past the rate's window).

Every run first returns abandoned claims (a worker that died or hung), then claims due
signals with `FOR UPDATE SKIP LOCKED`, so any number of evolution processes share the work
and each signal is in one attempt at a time. The claimed signals are learned from per
agent; an attempt that fails releases its signals with capped exponential backoff, and
the last allowed attempt ends in a terminal dead letter. `start` and `stop` are serialized:
concurrent transitions never leave two loops running or a stopped worker running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from popagent_core.errors import PopagentError
from popagent_core.secret_text import redact_secrets
from popagent_evolution.signals import SignalRecord, SignalRepo

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 1000
# Old outcomes go at most this often: the delete is cheap, but not worth a statement every pass.
PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True)
class WorkerConfig:
    poll_interval_s: float
    batch_size: int
    claim_timeout_s: float
    retry_base_s: float
    retry_cap_s: float


# Learns from one agent's claimed signals and settles them (or raises: the attempt failed).
Learn = Callable[[str, list[SignalRecord]], Awaitable[None]]


class EvolutionWorker:
    def __init__(self, signals: SignalRepo, learn: Learn, config: WorkerConfig, name: str) -> None:
        self.signals = signals
        self.learn = learn
        self.config = config
        self.name = name
        self._task: asyncio.Task[None] | None = None
        self._transition = asyncio.Lock()
        self._pruned_at: float | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        async with self._transition:
            if not self.running:
                self._task = asyncio.create_task(self._loop(), name=f"evolution-worker-{self.name}")

    async def stop(self) -> None:
        async with self._transition:
            task, self._task = self._task, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def run_once(self) -> int:
        """One pass: recover, claim one batch, learn from it; the number of signals claimed."""
        now = asyncio.get_running_loop().time()
        if self._pruned_at is None or now - self._pruned_at >= PRUNE_EVERY_S:
            await self.signals.prune_outcomes()
            self._pruned_at = now
        recovered = await self.signals.recover_abandoned(self.config.claim_timeout_s)
        if recovered:
            logger.warning("abandoned claims recovered", extra={"signals": recovered})
        claimed = await self.signals.claim(self.config.batch_size, self.name)
        by_agent: dict[str, list[SignalRecord]] = {}
        for signal in claimed:
            by_agent.setdefault(signal.agent_id, []).append(signal)
        for agent_id, group in by_agent.items():
            try:
                await self.learn(agent_id, group)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = str(exc) if isinstance(exc, PopagentError) else f"{type(exc).__name__}: {exc}"
                # The reason is shown by /api/autonomy/signals: nothing credential-like in it.
                reason = redact_secrets(reason)
                outcome = await self.signals.fail(
                    group,
                    reason[:MAX_ERROR_CHARS],
                    base_s=self.config.retry_base_s,
                    cap_s=self.config.retry_cap_s,
                )
                logger.warning(
                    "learning attempt failed",
                    extra={"agent_id": agent_id, "error": reason[:200], "statuses": sorted(set(outcome.values()))},
                )
        return len(claimed)

    async def _loop(self) -> None:
        while True:
            try:
                claimed = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("evolution worker pass failed", extra={"error": type(exc).__name__})
                claimed = 0
            if claimed < self.config.batch_size:
                await asyncio.sleep(self.config.poll_interval_s)
