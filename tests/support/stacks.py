"""Pieces the in-process test stacks share (tests/api, tests/chat, tests/tasks_turns).

Each suite builds its own stack of real services in one event loop; what they build it
from is here once: a fresh database per stack, the gateway app served by uvicorn, and the
hooks service with one handler per event on its own path of the HTTPS receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import asyncpg
import uvicorn

from popagent_dev.embedded import free_port, with_database
from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings as GatewaySettings
from popagent_hooks.service import build as build_hooks
from popagent_hooks.settings import Settings as HooksSettings
from support.https_receiver import HttpsReceiver, make_secret

# Hook event -> (receiver path, matcher or None for every target).
HookPaths = Mapping[str, tuple[str, list[str] | None]]


@contextlib.asynccontextmanager
async def fresh_database(admin_dsn: str, prefix: str) -> AsyncIterator[str]:
    """A new, empty database named `<prefix>_<random>`, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield with_database(admin_dsn, name)
    finally:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def serve_gateway(settings: GatewaySettings) -> AsyncIterator[str]:
    """The gateway app on uvicorn on a free port; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving


def hooks_document(receiver: HttpsReceiver, paths: HookPaths) -> str:
    """`POPAGENT_HOOKS` with one HTTP handler per event, each on its own path of `receiver`."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, (path, matcher) in paths.items():
        handler: dict[str, Any] = {
            "id": event.lower(),
            "type": "http",
            "url": receiver.url(path),
            "secret": make_secret(),
            "timeoutMs": 5000,
        }
        if matcher is not None:
            handler["matcher"] = matcher
        hooks[event] = [handler]
    return json.dumps({"version": 1, "hooks": hooks})


@contextlib.asynccontextmanager
async def serve_hooks(
    common: Mapping[str, Any], token: str, address: str, receiver: HttpsReceiver, paths: HookPaths
) -> AsyncIterator[None]:
    """The hooks service on `address`, with one handler per event of `paths` on `receiver`."""
    settings = HooksSettings(
        **{
            **common,
            "POPAGENT_INTERNAL_TOKEN": token,
            "POPAGENT_HOOKS_ADDR": address,
            "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
            "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
            "POPAGENT_HOOKS": hooks_document(receiver, paths),
        }
    )
    async with build_hooks(settings):
        yield
