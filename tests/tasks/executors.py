"""Executors for the tasks tests: real in-process executors whose behaviour is scripted by
the task's prompt, so one executor serves in-process tests and worker processes alike.

A prompt is a `;`-separated script, run in order:
  ok                   return "ok" (the default when nothing else returned)
  effect               insert (task_id, attempt, pid) into public.task_effects; a database
                       that is unreachable or cuts the session fails it as TaskFailure(database)
  fail:<class>         raise TaskFailure(<class>)
  fail-below:<n>:<cls> raise TaskFailure(<cls>) while the attempt number is below n
  raise                raise RuntimeError (an unknown failure)
  sleep:<s>            sleep cooperatively; an abort ends it with TaskFailure(aborted)
  hang:<s>             sleep <s> seconds ignoring any abort, then go on
  hang-below:<n>:<s>   the same, only while the attempt number is below n
  progress:<text>      report durable progress
  release:<name>       wait (ignoring abort) until the test sets the named gate

`python -m popagent_tasks worker --executor tasks.executors:scripted` runs it in a worker
process (PYTHONPATH must include tests/).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from popagent_tasks.executor import AbortSignal, Attempt, TaskFailure
from popagent_tasks.model import ErrorClass

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS public.task_effects (
    task_id uuid NOT NULL,
    attempt integer NOT NULL,
    pid integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@dataclass
class ScriptedExecutor:
    dsn: str = ""
    calls: list[tuple[str, int]] = field(default_factory=list)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    settled: list[tuple[str, int]] = field(default_factory=list)
    _pool: asyncpg.Pool | None = None
    _pool_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def _effects_pool(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=4)
        return self._pool

    async def execute(self, attempt: Attempt, abort: AbortSignal) -> str:
        self.calls.append((attempt.task_id, attempt.attempt))
        try:
            return await self._run(attempt, abort)
        finally:
            self.settled.append((attempt.task_id, attempt.attempt))

    async def _run(self, attempt: Attempt, abort: AbortSignal) -> str:
        result = "ok"
        for step in attempt.prompt.split(";"):
            op, _, arg = step.strip().partition(":")
            if op == "ok":
                result = "ok"
            elif op == "effect":
                await self._insert_effect(attempt)
            elif op == "fail":
                raise TaskFailure(ErrorClass(arg), f"scripted {arg} failure")
            elif op == "fail-below":
                below, _, error_class = arg.partition(":")
                if attempt.attempt < int(below):
                    raise TaskFailure(ErrorClass(error_class), f"scripted {error_class} failure")
            elif op == "raise":
                raise RuntimeError("scripted unexpected error")
            elif op == "sleep":
                try:
                    await asyncio.wait_for(abort.wait(), timeout=float(arg))
                except TimeoutError:
                    continue
                raise TaskFailure(ErrorClass.ABORTED, f"aborted ({abort.reason})")
            elif op == "hang":
                await asyncio.sleep(float(arg))
            elif op == "hang-below":
                below, _, seconds = arg.partition(":")
                if attempt.attempt < int(below):
                    await asyncio.sleep(float(seconds))
            elif op == "progress":
                await attempt.report_progress(arg)
            elif op == "release":
                await self.gate(arg).wait()
            else:
                raise ValueError(f"unknown script step {step!r}")
        return result

    async def _insert_effect(self, attempt: Attempt) -> None:
        try:
            pool = await self._effects_pool()
            await pool.execute(
                "INSERT INTO public.task_effects (task_id, attempt, pid) VALUES ($1, $2, $3)",
                attempt.task_id,
                attempt.attempt,
                os.getpid(),
            )
        # (InternalClientError: what asyncpg raises on a session the server cut mid-statement.)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError) as exc:
            # What the real executor reports for a storage outage (StorageError -> database): the
            # worker releases the attempt to the queue instead of failing a user task for good.
            raise TaskFailure(ErrorClass.DATABASE, f"effect not written: {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()


def scripted(settings: Any) -> ScriptedExecutor:
    """Executor factory for worker processes: effects go to the service's database."""
    return ScriptedExecutor(dsn=settings.database_url)
