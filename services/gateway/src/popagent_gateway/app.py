"""The gateway: a stateless FastAPI edge that forwards to the services over gRPC."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
from fastapi import APIRouter, Depends, FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from popagent_core.grpc_client import make_channel, open_channel
from popagent_core.lifecycle import settle_heap
from popagent_core.span_store import secret_values, span_store_export
from popagent_core.telemetry import tracing_enabled
from popagent_gateway.bounded import ApiKeyMiddleware, BoundedBodyMiddleware, SecurityHeadersMiddleware
from popagent_gateway.deps import refuse_unknown_query, require_api_key
from popagent_gateway.dto.attachments import ATTACHMENT_UPLOAD_PATH, MAX_ATTACHMENT_BYTES
from popagent_gateway.errors import ERROR_RESPONSES, install_error_handlers
from popagent_gateway.interop import mount_interop
from popagent_gateway.json_bounds import JsonBoundsMiddleware
from popagent_gateway.observability.feedback_events import FeedbackEvents
from popagent_gateway.observability.store import ObservabilityStore
from popagent_gateway.openapi_links import install_links
from popagent_gateway.routes import (
    agents,
    approvals,
    attachments,
    autonomy,
    browser,
    channels,
    chat,
    documents,
    health,
    hooks,
    mcp_servers,
    memories,
    memory_view,
    models,
    observability,
    schedules,
    secrets,
    self_update,
    sessions,
    skills,
    tasks,
    workspaces,
)
from popagent_gateway.routes import (
    settings as settings_routes,
)
from popagent_gateway.runners import RunnerDirectory
from popagent_gateway.settings import Settings
from popagent_gateway.ui import mount_ui


def create_app(settings: Settings, *, own_process: bool = False) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                span_store_export(
                    settings.observability_database_url,
                    service="popagent-gateway",
                    secrets=secret_values(settings),
                    info_loggers=settings.stored_info_loggers,
                    retention=settings.observability_retention,
                )
            )

            # Reads of /api/observability; the pool opens on first use, so a store that is down
            # does not keep the gateway from starting.
            app.state.observability_store = ObservabilityStore(settings.observability_database_url)
            stack.push_async_callback(app.state.observability_store.close)
            app.state.feedback_events = FeedbackEvents(
                settings.nats_url, ack_timeout_s=settings.rpc_timeout_s, stream_replicas=settings.nats_stream_replicas
            )
            stack.push_async_callback(app.state.feedback_events.close)

            # Every unary call gets the one deadline (POPAGENT_GATEWAY_RPC_TIMEOUT_S) unless it sets its own;
            # the streamed chat turn gets none (open_channel).
            def channel_to(address: str) -> contextlib.AbstractAsyncContextManager[grpc.aio.Channel]:
                return open_channel(address, settings.internal_token, unary_timeout_s=settings.rpc_timeout_s)

            app.state.channels = {
                name: await stack.enter_async_context(channel_to(address))
                for name, address in settings.service_addresses().items()
            }
            # Where a session's turns go (deps.on_session_runner): the agent-runners that announce
            # themselves on NATS, else one channel per configured worker (with one worker, the
            # service channel itself).
            workers = settings.agent_runner_workers
            static = (
                [(workers[0], app.state.channels["agent-runner"])]
                if len(workers) == 1
                else [(address, await stack.enter_async_context(channel_to(address))) for address in workers]
            )
            app.state.runners = await stack.enter_async_context(
                RunnerDirectory(
                    static=static,
                    make_channel=lambda address: make_channel(
                        address, settings.internal_token, unary_timeout_s=settings.rpc_timeout_s
                    ),
                    nats_url=settings.nats_url,
                )
            )
            # Entered last, left first: MCP requests and A2A tasks end before the channels they call close.
            stack.push_async_callback(app.state.mcp.aclose)
            stack.push_async_callback(app.state.a2a.aclose)
            if own_process:
                # The gateway is this process's only job (`python -m popagent_gateway`); an app a
                # test or a bench hosts leaves its host's collector alone.
                settle_heap()
            yield

    # /docs and /redoc load their bundles from a public CDN: served only when asked for
    # (POPAGENT_GATEWAY_DOCS), so nothing the gateway serves by default runs code from elsewhere.
    docs_url, redoc_url = ("/docs", "/redoc") if settings.docs_enabled else (None, None)
    app = FastAPI(title="popagent", version="0.1.0", lifespan=lifespan, docs_url=docs_url, redoc_url=redoc_url)
    app.state.settings = settings
    # Set when the process is told to stop (`serving.GatewayServer`), before its connections drain.
    app.state.stopping = False
    install_error_handlers(app)
    # Added last = outermost: the key is checked before the body is read at all, the body is
    # capped while it is read, then checked for JSON no service could store (422 naming the field).
    app.add_middleware(JsonBoundsMiddleware)
    app.add_middleware(
        BoundedBodyMiddleware,
        max_bytes=settings.max_body_bytes,
        upload_path=ATTACHMENT_UPLOAD_PATH,
        upload_max_bytes=MAX_ATTACHMENT_BYTES,
    )
    app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    # Outermost: the refusals above carry the headers too.
    docs_paths = frozenset(path for path in (docs_url, redoc_url) if path is not None)
    app.add_middleware(SecurityHeadersMiddleware, docs_paths=docs_paths)

    # Every /api route documents the edge's error answers (401 from the key, 413 from the
    # body cap, 422 from validation, the mapped service statuses), so clients and
    # schemathesis see what the edge really answers.
    api = APIRouter(
        prefix="/api", dependencies=[Depends(require_api_key), Depends(refuse_unknown_query)], responses=ERROR_RESPONSES
    )
    for module in (
        health,
        models,
        sessions,
        hooks,
        chat,
        memories,
        memory_view,
        settings_routes,
        agents,
        approvals,
        skills,
        autonomy,
        workspaces,
        documents,
        tasks,
        schedules,
        self_update,
        secrets,
        observability,
        browser,
        mcp_servers,
        attachments,
        channels,
    ):
        api.include_router(module.router)
    app.include_router(api)
    # The one /api route without the key (a browser redirect cannot carry it): its state authorizes it.
    app.include_router(mcp_servers.callback_router, prefix="/api")
    app.include_router(channels.webhooks, dependencies=[Depends(refuse_unknown_query)], responses=ERROR_RESPONSES)
    install_links(app)
    app.state.mcp, app.state.a2a = mount_interop(app, settings)
    # Last, so /api, /mcp, /a2a and the agent card win over the static files.
    mount_ui(app, settings.ui_dir)
    # One server span per request, its trace context passed on to every RPC the route makes. No
    # spans per ASGI message: a streamed chat answer sends one per chunk. None with tracing off
    # (OTEL_SDK_DISABLED): the middleware would still run for every request, recording nothing.
    if tracing_enabled():
        FastAPIInstrumentor.instrument_app(app, exclude_spans=["receive", "send"])
    return app
