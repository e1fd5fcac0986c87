"""JSON bodies the services cannot store, refused at the edge with a 422 naming the field.

Valid JSON can still be unstorable further in: an integer past 64 bits, nesting deeper than
the serializers take (orjson stops at 255 levels, Python's parser near 1,000), a lone
surrogate (`"\\ud800"`, no UTF-8 can carry it), a NUL character (PostgreSQL text cannot hold
it), NaN or an infinity. Each used to fail deep in a route with a 500 (or a 400 naming a
database exception class). `JsonBoundsMiddleware` reads an /api request's body once (it also
makes the body cap answer 413 for a chunked body, which FastAPI's parser turned into a 400),
checks it, and hands the same bytes on.

The common case costs one orjson parse and a few byte scans: the slow walk that finds the
offending field runs only when a scan says a bound may be crossed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from popagent_gateway.bounded import send_json

MAX_JSON_DEPTH = 64
MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

# A run of 19+ digits may be past the 64-bit range (orjson parses such integers as floats).
_LONG_DIGITS = re.compile(rb"\d{19,}")
# Escapes and raw bytes (Python's parser passes surrogates through) that can make a surrogate.
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")
_NUL = re.compile(rb"\\u0000|\x00")


class Violation(Exception):
    def __init__(self, loc: list[str | int], msg: str, kind: str) -> None:
        super().__init__(msg)
        self.loc, self.msg, self.kind = loc, msg, kind


def _check_string(value: str, loc: list[str | int]) -> None:
    if "\x00" in value:
        raise Violation(loc, "must not contain NUL characters", "string_nul")
    if any("\ud800" <= char <= "\udfff" for char in value):
        raise Violation(loc, "must not contain lone surrogates", "string_surrogate")


def _walk(document: Any) -> None:
    """Raises the first Violation in `document`, depth first, with its location under `body`."""
    stack: list[tuple[Any, list[str | int]]] = [(document, ["body"])]
    while stack:
        value, loc = stack.pop()
        if len(loc) - 1 > MAX_JSON_DEPTH:
            raise Violation(loc, f"nesting deeper than {MAX_JSON_DEPTH} levels", "json_too_deep")
        if isinstance(value, dict):
            for key, item in value.items():
                _check_string(key, [*loc, key])
                stack.append((item, [*loc, key]))
        elif isinstance(value, list):
            stack.extend((item, [*loc, index]) for index, item in enumerate(value))
        elif isinstance(value, str):
            _check_string(value, loc)
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if not MIN_INT <= value <= MAX_INT:
                raise Violation(loc, "integer outside the signed 64-bit range", "int_too_large")
        elif isinstance(value, float) and not math.isfinite(value):
            raise Violation(loc, "number must be finite", "float_not_finite")


def _depth_exceeds(document: Any) -> bool:
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values() if isinstance(item, dict | list))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value if isinstance(item, dict | list))
    return False


def check_json_body(body: bytes) -> Violation | None:
    """The first bound `body` crosses, or None (also for a body that is not JSON at all:
    the route's own parser answers that)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson refuses what Python's parser (the routes') accepts: lone surrogates, NaN,
        # infinities, deep nesting. Find which, and where.
        return _slow_check(body)
    suspicious = (
        _LONG_DIGITS.search(body) is not None or _SURROGATE.search(body) is not None or _NUL.search(body) is not None
    )
    if suspicious:
        return _slow_check(body)
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH and _depth_exceeds(document):
        return _slow_check(body)
    return None


def _slow_check(body: bytes) -> Violation | None:
    try:
        document = json.loads(body, parse_constant=lambda name: float(name))
    except RecursionError:
        return Violation(["body"], f"nesting deeper than {MAX_JSON_DEPTH} levels", "json_too_deep")
    except ValueError:
        return None
    try:
        _walk(document)
    except Violation as violation:
        return violation
    return None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    # FastAPI parses a body without a content type as JSON too.
    return True


class JsonBoundsMiddleware:
    """Reads an /api request's whole body (already capped by BoundedBodyMiddleware, outside
    this one), refuses unstorable JSON with 422, and replays the body to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS or not scope["path"].startswith("/api"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before sending its body.
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(scope):
            violation = check_json_body(body)
            if violation is not None:
                detail = {"loc": violation.loc, "msg": violation.msg, "type": violation.kind}
                await send_json(send, 422, {"error": "invalid request", "details": [detail]})
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
