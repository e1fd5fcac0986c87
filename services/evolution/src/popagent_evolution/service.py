"""Wiring of the evolution service: autonomy settings, the outcome consumer, the learning worker."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent.evolution.v1 import evolution_pb2_grpc, learning_pb2_grpc
from popagent_core import bus, subjects
from popagent_core.grpc_client import map_rpc_errors, open_channel
from popagent_core.lifecycle import background_task
from popagent_core.service import service_kernel
from popagent_evolution.ingest import DURABLE, outcome_handler
from popagent_evolution.learned import LearnedStore
from popagent_evolution.learning import Learner
from popagent_evolution.learning_servicer import EvolutionLearningServicer
from popagent_evolution.reflection import Reflector
from popagent_evolution.repo import AutonomySettingsRepo
from popagent_evolution.servicer import EvolutionServicer
from popagent_evolution.settings import Settings
from popagent_evolution.signals import SignalRepo
from popagent_evolution.worker import EvolutionWorker, WorkerConfig

MIGRATIONS = Path(__file__).parent / "migrations"


@dataclass(frozen=True)
class RunningEvolution:
    worker: EvolutionWorker | None


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[RunningEvolution]:
    async with service_kernel("evolution", settings, MIGRATIONS) as kernel, contextlib.AsyncExitStack() as stack:
        autonomy = AutonomySettingsRepo(kernel.pool)
        signals = SignalRepo(kernel.pool)
        learned = LearnedStore(kernel.pool, signals)
        evolution_pb2_grpc.add_EvolutionServiceServicer_to_server(EvolutionServicer(autonomy), kernel.server)
        learning_pb2_grpc.add_EvolutionLearningServiceServicer_to_server(
            EvolutionLearningServicer(signals, learned), kernel.server
        )
        # Chat and task turns publish the same outcome event; one durable consumer (shared by
        # every evolution process) turns failures into signals.
        await stack.enter_async_context(
            background_task(
                lambda: bus.consume_batches(
                    kernel.js,
                    subject=subjects.TURN_COMPLETED,
                    durable=DURABLE,
                    handler=outcome_handler(
                        signals, max_attempts=settings.max_attempts, delay_s=settings.signal_delay_s
                    ),
                    ack_wait_s=settings.ack_wait_s,
                ),
                name="evolution-outcomes",
            )
        )
        worker: EvolutionWorker | None = None
        if settings.worker_enabled:
            runner_channel = await stack.enter_async_context(
                open_channel(settings.agent_runner_address, settings.internal_token, unary_timeout_s=10.0)
            )
            runner = agent_runner_pb2_grpc.AgentRunnerStateServiceStub(runner_channel)

            async def default_model() -> str:
                with map_rpc_errors():
                    return (await runner.GetAgentRuntimeSettings(arpb.GetAgentRuntimeSettingsRequest())).default_model

            reflector = Reflector(settings.ninerouter_url, settings.ninerouter_api_key, settings.reflection_timeout_s)
            worker = EvolutionWorker(
                signals,
                Learner(autonomy, reflector, learned, default_model),
                WorkerConfig(
                    poll_interval_s=settings.poll_interval_s,
                    batch_size=settings.batch_size,
                    claim_timeout_s=settings.claim_timeout_s,
                    retry_base_s=settings.retry_base_s,
                    retry_cap_s=settings.retry_cap_s,
                ),
                name=f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
            )
            await worker.start()
            stack.push_async_callback(worker.stop)
        async with kernel.serving(settings.grpc_address):
            yield RunningEvolution(worker)
