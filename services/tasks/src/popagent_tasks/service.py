"""Wiring of the tasks service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts.

Every replica runs the same parts: the API (unless `serve_api` is off, for worker-only
processes), the scheduler, and, when an executor is configured, the worker with its
recovery sweep. Unwinding stops the worker first (grace, abort, acknowledgement), then
the API (with its own grace), then the scheduler.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from nats.aio.msg import Msg

from popagent.events.v1 import events_pb2
from popagent.tasks.v1 import tasks_pb2_grpc
from popagent_core import subjects
from popagent_core.lifecycle import background_task
from popagent_core.service import service_kernel
from popagent_tasks.executor import Executor, load_executor
from popagent_tasks.observer import LifecycleObserver, Observers, open_observers
from popagent_tasks.repo import TaskRepo
from popagent_tasks.schedules import Scheduler, backfill_schedules
from popagent_tasks.self_update import GrpcPlanSource, SelfUpdateScheduler
from popagent_tasks.servicer import TasksServicer
from popagent_tasks.settings import Settings
from popagent_tasks.worker import RuntimeConfig, Worker

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"


@dataclass
class RunningTasks:
    repo: TaskRepo
    worker: Worker | None
    scheduler: Scheduler | None
    port: int
    self_update: SelfUpdateScheduler | None = None


@contextlib.asynccontextmanager
async def build(
    settings: Settings,
    *,
    serve_api: bool = True,
    executor: Executor | None = None,
    extra_observers: tuple[LifecycleObserver, ...] = (),
) -> AsyncIterator[RunningTasks]:
    """The tasks service. `executor` overrides POPAGENT_TASKS_EXECUTOR (tests pass their own);
    `extra_observers` run after the service's own (`observer.OBSERVERS`)."""
    async with (
        service_kernel("tasks", settings, MIGRATIONS, pool_max_size=settings.pool_max_size) as kernel,
        contextlib.AsyncExitStack() as stack,
    ):
        nc = kernel.nats

        async def publish_wake(task_id: str) -> None:
            await nc.publish(subjects.TASK_ENQUEUED, events_pb2.TaskEnqueued(task_id=task_id).SerializeToString())

        repo = TaskRepo(kernel.pool, wake=publish_wake)
        await backfill_schedules(kernel.pool, settings.timezone)

        observers = [*await open_observers(settings, stack), *extra_observers]

        plans: GrpcPlanSource | None = None
        self_update: SelfUpdateScheduler | None = None
        if settings.self_update_scheduler_enabled and settings.agent_runner_address:
            plans = GrpcPlanSource(settings.evolution_address, settings.agent_runner_address, settings.internal_token)
            self_update = SelfUpdateScheduler(
                repo, plans.plan, settings.timezone, interval_s=settings.self_update_reconcile_s
            )
            await self_update.start()
            stack.push_async_callback(self_update.stop)
            wake_self_update = self_update.wake

            async def on_autonomy_changed(msg: Msg) -> None:
                # Evolution's learning fact also announces autonomy changes; it carries nothing to read.
                wake_self_update()

            autonomy_subscription = await nc.subscribe(subjects.LEARNING_CHANGED, cb=on_autonomy_changed)
            stack.push_async_callback(autonomy_subscription.unsubscribe)

        scheduler: Scheduler | None = None
        if settings.scheduler_enabled:
            scheduler = Scheduler(repo, self_update_allowed=plans.allows if plans is not None else None)
            await stack.enter_async_context(background_task(scheduler.run, name="tasks-scheduler"))

        port = 0
        if serve_api:
            servicer = TasksServicer(repo, settings.timezone, scheduler.wake if scheduler else None)
            tasks_pb2_grpc.add_TasksServiceServicer_to_server(servicer, kernel.server)
            port = await stack.enter_async_context(kernel.serving(settings.grpc_address))

        worker: Worker | None = None
        if executor is None and settings.executor:
            executor = load_executor(settings.executor, settings)
        if executor is not None:
            worker = Worker(repo, executor, Observers(observers), RuntimeConfig.from_settings(settings))

            async def on_enqueued(msg: Msg) -> None:
                worker.wake()

            subscription = await nc.subscribe(subjects.TASK_ENQUEUED, cb=on_enqueued)
            stack.push_async_callback(subscription.unsubscribe)

            async def on_runtime_changed(msg: Msg) -> None:
                # The relay's JetStream copy reaches core subscribers too; every replica's
                # worker hears it. The fact carries nothing: the settings are re-read.
                try:
                    await worker.refresh_runtime()
                except Exception:
                    logger.warning("runtime settings re-read failed; keeping the current runtime", exc_info=True)

            runtime_subscription = await nc.subscribe(subjects.AGENT_RUNTIME_SETTINGS_CHANGED, cb=on_runtime_changed)
            stack.push_async_callback(runtime_subscription.unsubscribe)
            stack.push_async_callback(worker.close)
            await worker.start()
            logger.info("worker started", extra={"worker_id": worker.worker_id, "executor": type(executor).__name__})
        else:
            logger.warning("no executor configured (POPAGENT_TASKS_EXECUTOR): this process runs no worker")
        yield RunningTasks(repo, worker, scheduler, port, self_update)
