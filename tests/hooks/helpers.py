"""Helpers for the hooks tests: configuration documents and the service built in-process."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from popagent_core.grpc_client import open_channel
from popagent_dev.embedded import free_port
from popagent_hooks.config import HooksConfig, parse_hooks_config
from popagent_hooks.service import MIGRATIONS, RunningHooks, build
from popagent_hooks.settings import Settings
from support.https_receiver import HttpsReceiver, make_secret

ALLOWED = "127.0.0.1,localhost,hooks.test"

# The example of docs/hooks.md (Configuration), verbatim: it has no `secret`.
SPEC_EXAMPLE = """{
"version": 1,
"hooks": {
"PreToolUse": [
{
"id": "tool-policy",
"type": "http",
"url": "https://hooks.example.com/popagent",
"matcher": ["remember", "useBrowserSecret"],
"timeoutMs": 2000,
"failureMode": "closed"
}
]
}
}"""


def handler(handler_id: str, url: str, **fields: Any) -> dict[str, Any]:
    """One handler entry with a fresh signing secret unless given; `secret=None` leaves it unsigned."""
    secret = fields.pop("secret", make_secret())
    return {
        "id": handler_id,
        "type": "http",
        "url": url,
        **({"secret": secret} if secret is not None else {}),
        **fields,
    }


def document(**events: list[dict[str, Any]]) -> str:
    return json.dumps({"version": 1, "hooks": events})


def config_of(**events: list[dict[str, Any]]) -> HooksConfig:
    return parse_hooks_config(document(**events), frozenset(ALLOWED.split(",")))


def service_env(
    dsn: str, nats_url: str, callers: str, receiver: HttpsReceiver | None, hooks: str | None, **extra: str
) -> dict[str, str]:
    env = {
        "DATABASE_URL": dsn,
        "NATS_URL": nats_url,
        "POPAGENT_INTERNAL_CALLERS": callers,
        "POPAGENT_HOOKS_ADDR": f"127.0.0.1:{free_port()}",
        "POPAGENT_HOOK_ALLOWED_HOSTS": ALLOWED,
        "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
        **extra,
    }
    if receiver is not None:
        env["POPAGENT_HOOK_CA_FILE"] = str(receiver.ca_file)
    if hooks is not None:
        env["POPAGENT_HOOKS"] = hooks
    return env


@contextlib.asynccontextmanager
async def running_service(env: dict[str, str], token: str) -> AsyncIterator[tuple[RunningHooks, Any]]:
    """The hooks service built in-process (real gRPC server on a free port) and a channel to it."""
    settings = Settings(**env)  # type: ignore[arg-type]
    async with build(settings) as running, open_channel(f"127.0.0.1:{running.port}", token) as channel:
        yield running, channel


HOOKS_MIGRATIONS = {"hooks": MIGRATIONS}


class RecordingAuth(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds the caller credential and records every RPC method the client makes."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.methods: list[str] = []

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        method = client_call_details.method
        self.methods.append(method.decode() if isinstance(method, bytes) else method)
        details = grpc.aio.ClientCallDetails(
            client_call_details.method,
            client_call_details.timeout,
            grpc.aio.Metadata(("authorization", f"Bearer {self.token}")),
            client_call_details.credentials,
            client_call_details.wait_for_ready,
        )
        return await continuation(details, request)
