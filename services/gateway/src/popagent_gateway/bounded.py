"""ASGI guards in front of the app: the API key on /api, and the body-size bound enforced
while reading (413 before the app sees it)."""

from __future__ import annotations

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


class ApiKeyMiddleware:
    """Refuses /api requests without the key before routing and body parsing, so a
    keyless request with a malformed body is a 401, never a 422 that reveals the schema.
    The per-route dependency stays as the inventory-checked second line."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.api_key and scope["path"].startswith("/api"):
            supplied = next((v for k, v in scope.get("headers", ()) if k == API_KEY_HEADER_BYTES), b"")
            if not api_key_matches(self.api_key, supplied.decode("latin-1")):
                await send_json(send, 401, {"error": UNAUTHENTICATED_MESSAGE})
                return
        await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    pass


class BoundedBodyMiddleware:
    """Refuses bodies over `max_bytes`: by Content-Length up front, or as the stream exceeds it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(send)
                return
        seen = 0
        started = False

        async def bounded_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
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
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        await send_json(send, 413, {"error": f"request body exceeds {self.max_bytes} bytes"})
