"""The gateway: a stateless FastAPI edge that forwards to the services over gRPC."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, FastAPI

from popagent_core.grpc_client import open_channel
from popagent_gateway.bounded import BoundedBodyMiddleware
from popagent_gateway.deps import require_api_key
from popagent_gateway.errors import install_error_handlers
from popagent_gateway.routes import health, hooks, secrets
from popagent_gateway.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            app.state.channels = {
                name: await stack.enter_async_context(open_channel(address, settings.internal_token))
                for name, address in settings.service_addresses().items()
            }
            yield

    app = FastAPI(title="popagent", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app)
    app.add_middleware(BoundedBodyMiddleware, max_bytes=settings.max_body_bytes)

    api = APIRouter(prefix="/api", dependencies=[Depends(require_api_key)])
    api.include_router(health.router)
    api.include_router(hooks.router)
    api.include_router(secrets.router)
    app.include_router(api)
    return app
