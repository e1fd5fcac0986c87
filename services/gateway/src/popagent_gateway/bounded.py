"""ASGI guards in front of the app: the API key on /api, /mcp and /a2a, and the body-size bound enforced
while reading (413 before the app sees it)."""

from __future__ import annotations

import re

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from popagent_gateway.deps import API_KEY_HEADER, UNAUTHENTICATED_MESSAGE, api_key_matches


async def send_json(send: Send, status: int, payload: dict[str, object]) -> None:
    body = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


API_KEY_HEADER_BYTES = API_KEY_HEADER.encode()
# popagent's MCP server (mcp_server.py) and its A2A endpoint (a2a_agent.py; its card, at the path
# A2A names, is public): guarded by the same key as /api.
MCP_PATH = "/mcp"
A2A_PATH = "/a2a"
AGENT_CARD_PATH = "/.well-known/agent-card.json"


def _at(path: str, endpoint: str) -> bool:
    return path == endpoint or path.startswith(endpoint + "/")


def takes_bearer(path: str) -> bool:
    """The endpoints whose clients (MCP's, A2A's) are configured with `Authorization: Bearer`."""
    return _at(path, MCP_PATH) or _at(path, A2A_PATH)


# /api routes a browser redirect reaches, which cannot carry the key: each is authorized by what it
# carries instead (the MCP OAuth callback: the single-use, expiring state its start issued).
KEYLESS_API_PATHS = frozenset({"/api/mcp-servers/oauth/callback"})
# A channel's webhook is signed by its platform (agent-runner checks the signature on the raw body),
# never sent with the API key (docs/channels.md).
_CHANNEL_EVENTS = re.compile(r"^/api/channels/[^/]+/events$")


def platform_signed(path: str) -> bool:
    return _CHANNEL_EVENTS.fullmatch(path) is not None


def guarded(path: str) -> bool:
    return (path.startswith("/api") and path not in KEYLESS_API_PATHS and not platform_signed(path)) or takes_bearer(
        path
    )


def key_admitted(api_key: str, scope: Scope) -> bool:
    """Whether the request carries the key: as `x-popagent-key`, or on /mcp and /a2a also as
    `Authorization: Bearer <key>`, the header MCP and A2A clients are configured with."""
    supplied: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == API_KEY_HEADER_BYTES:
            supplied.append(value.decode("latin-1"))
        elif name == b"authorization" and takes_bearer(scope["path"]):
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                supplied.append(token.strip())
    # No header at all is the empty key, which only an unset key admits.
    return any(api_key_matches(api_key, key) for key in supplied or [""])


class ApiKeyMiddleware:
    """Refuses /api, /mcp and /a2a requests without the key before routing and body parsing, so a
    keyless request with a malformed body is a 401, never a 422 that reveals the schema.
    The per-route dependency (on /mcp and /a2a, their endpoints) stays as the inventory-checked second line."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded_request = scope["type"] == "http" and self.api_key and guarded(scope["path"])
        if guarded_request and not key_admitted(self.api_key, scope):
            await send_json(send, 401, {"error": UNAUTHENTICATED_MESSAGE})
            return
        await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    pass


class BoundedBodyMiddleware:
    """Refuses bodies over `max_bytes`: by Content-Length up front, or as the stream exceeds it."""

    def __init__(self, app: ASGIApp, max_bytes: int, upload_path: re.Pattern[str], upload_max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # An upload route's body is a file (an attachment), bounded by its own limit, never by less than the default.
        self.upload_path = upload_path
        self.upload_max_bytes = max(upload_max_bytes, max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = (
            self.upload_max_bytes
            if scope["method"] == "POST" and self.upload_path.fullmatch(scope["path"])
            else self.max_bytes
        )
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > max_bytes:
                await self._reject(send, max_bytes)
                return
        seen = 0
        started = False

        async def bounded_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send, max_bytes)

    async def _reject(self, send: Send, max_bytes: int) -> None:
        await send_json(send, 413, {"error": f"request body exceeds {max_bytes} bytes"})


# The built UI (ui/dist) is same-origin modules and styles only. Its scripts hold the API key
# (in localStorage): no script from anywhere else, no inline script, no framing (clickjacking),
# and no image from elsewhere, so a model's Markdown image cannot carry a conversation out.
# Inline styles stay allowed: code highlighting sets colours in `style` attributes.
UI_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# FastAPI's /docs and /redoc pages (only with POPAGENT_GATEWAY_DOCS=true): their inline
# start-up script and the CDN's bundle, nothing else; never framed either.
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
    "font-src 'self' https://fonts.gstatic.com; img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly; "
    "worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


class SecurityHeadersMiddleware:
    """Every answer (the UI's files, /docs, the API's JSON and its refusals) carries the
    browser-side guards: the CSP above, no framing, no content-type sniffing, no referrer."""

    def __init__(self, app: ASGIApp, docs_paths: frozenset[str]) -> None:
        self.app = app
        self.docs_paths = docs_paths
        self._ui = self._headers(UI_POLICY)
        self._docs = self._headers(DOCS_POLICY)

    @staticmethod
    def _headers(policy: str) -> list[tuple[bytes, bytes]]:
        return [
            (b"content-security-policy", policy.encode()),
            (b"x-frame-options", b"DENY"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = self._docs if scope["path"] in self.docs_paths else self._ui

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [(name, value) for name, value in added if name not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, guarded_send)
