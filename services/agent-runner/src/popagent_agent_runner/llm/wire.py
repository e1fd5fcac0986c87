"""The wire of the lean OpenAI-compatible model: SSE framing, and provider errors classified as `OpenAIChatModel` does.

Nothing here does I/O, so each piece is unit-tested on its own. The error mapping mirrors pydantic-ai's
`OpenAIChatModel` (pydantic-ai 2.68, `models/openai/`) on plain dicts, because that module imports
the openai SDK (half a second and tens of MB per process).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Final

import httpx
import orjson
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelOverloadedError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
)

from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.llm.pydantic_ai_internals import model_errors
from popagent_core.errors import StorageError

__all__ = ["DONE", "PACE_READS", "ModelFailure", "SSEDecoder", "classify_model_error"]

DONE: Final = b"[DONE]"
PACE_READS: Final = "popagent.pace_reads"
"""A response extension of the model transport: `pace(interval_s, wake_on)` hands the rest of the body on at
most once per interval, and its end (or bytes holding `wake_on`) at once (see `llm.transport`)."""


class SSEDecoder:
    """Server-sent events framing over raw bytes: feed network chunks, get each event's `data` back.

    Works on bytes so a payload goes to `orjson.loads` without a decode and re-encode. Follows the
    SSE rules the openai SDK follows (an event ends at a blank line; several `data:` lines join with
    a newline; comments and other fields are skipped; CR, LF and CRLF all end a line), so both see
    the same events from the same bytes.
    """

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The data of every event completed by `chunk`."""
        buffer = self._buffer + chunk if self._buffer else chunk
        tail = b""
        if b"\r" in buffer:
            # Rare (most servers send LF only), so the fast path never pays for it. A CR at the very
            # end may be the first half of a CRLF split across reads: keep it for the next chunk.
            if buffer.endswith(b"\r"):
                buffer, tail = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        data = self._data
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if not line:
                if data:
                    yield data[0] if len(data) == 1 else b"\n".join(data)
                    data.clear()
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            # Comments (":"), `event:`, `id:` and `retry:` lines carry nothing chat completions use.
        self._buffer = buffer[start:] + tail

    def close(self) -> Iterator[bytes]:
        """The data of an event the stream ended without its blank line."""
        if self._buffer.startswith(b"data:"):
            line = self._buffer.rstrip(b"\r")
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
        self._buffer = b""
        if self._data:
            yield b"\n".join(self._data)
            self._data.clear()


def loads(payload: bytes) -> Any:
    return orjson.loads(payload)


# -- errors --------------------------------------------------------------------------------------------------------


def status_error(model_name: str, status_code: int, content: bytes, headers: Mapping[str, str]) -> ModelHTTPError:
    """The error for an HTTP error status, classified as `OpenAIChatModel` classifies it.

    The body kept on the error is the `error` object when the server sent one, as the openai SDK keeps it.
    """
    text = content.decode("utf-8", "replace").strip()
    try:
        parsed: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = text  # as the openai SDK keeps a body that isn't JSON
    body = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    code = error_type = None
    message: object = None
    if isinstance(body, dict):
        raw_code = body.get("code")
        code = str(raw_code) if raw_code is not None else None
        error_type = body.get("type") if isinstance(body.get("type"), str) else None
        message = body.get("message")
    category = model_errors.openai_compatible_category(status_code, code, error_type, message)
    return ModelHTTPError.for_category(
        category,
        status_code=status_code,
        model_name=model_name,
        body=body,
        headers=headers,
        provider_error_code=code,
        provider_error_type=error_type,
    )


def stream_error(model_name: str, error: object) -> ModelAPIError:
    """The error for an `{"error": ...}` object sent inside an open stream, as `OpenAIChatModel` raises it."""
    message = error.get("message") if isinstance(error, dict) else None
    if not message or not isinstance(message, str):
        message = "An error occurred during streaming"
    return model_errors.stream_error(model_name, message, error)


def transport_error(model_name: str, error: httpx.TransportError, *, in_stream: bool = False) -> ModelConnectionError:
    """The error for a request that could not reach the server or whose response could not be read.

    `in_stream`: the response had begun streaming (a broken stream, which `StopFailure` reports as such).
    """
    message = str(error) or type(error).__name__
    failure = model_errors.connection_error(
        model_name, message, error, timeout=isinstance(error, httpx.TimeoutException)
    )
    failure.in_stream = in_stream
    return failure


def broken_stream_error(model_name: str, detail: str) -> ModelConnectionError:
    """The error for a stream that ended before `[DONE]` and before any finish reason."""
    return ModelConnectionError(model_name, f"Stream ended before [DONE]: {detail}", phase="read", in_stream=True)


@dataclasses.dataclass(frozen=True)
class ModelFailure:
    """What the turn reports with `StopFailure` for an exception out of a model request."""

    error_class: TurnFailure
    """One of the provider classes of `TurnFailure` (`PROVIDER_ERROR` for another provider error)
    or `FRAMEWORK` (not a provider error at all)."""
    status_code: int | None
    """The HTTP status, or the status the provider uses for an error it reported inside a stream."""
    retry_after: float | None
    """Seconds the provider asked to wait, from `Retry-After` / `retry-after-ms`."""
    message: str
    in_stream: bool = False


def classify_model_error(error: BaseException) -> ModelFailure:
    """Name the failure of a model request for `StopFailure`. Never given `CancelledError`: that is not a failure."""
    if isinstance(error, StorageError):
        # The database, not the turn: a task attempt that ends so is requeued.
        return ModelFailure(TurnFailure.STORAGE, None, None, str(error))
    if not isinstance(error, ModelAPIError):
        return ModelFailure(TurnFailure.FRAMEWORK, None, None, str(error) or type(error).__name__)
    # Most specific first: the categories nest (overloaded < unavailable, authentication < rejected).
    classes: tuple[tuple[type[ModelAPIError], TurnFailure], ...] = (
        (ModelRequestTimeout, TurnFailure.REQUEST_TIMEOUT),
        (ModelTimeoutError, TurnFailure.TIMEOUT),
        (ModelConnectionError, TurnFailure.CONNECTION),
        (ModelRateLimitError, TurnFailure.RATE_LIMIT),
        (ModelQuotaExceededError, TurnFailure.QUOTA),
        (ModelOverloadedError, TurnFailure.OVERLOADED),
        (ModelUnavailableError, TurnFailure.UNAVAILABLE),
        (ModelServerError, TurnFailure.SERVER_ERROR),
        (ModelAuthenticationError, TurnFailure.AUTHENTICATION),
        (ModelNotFoundError, TurnFailure.NOT_FOUND),
        (ModelContextWindowExceededError, TurnFailure.CONTEXT_WINDOW),
        (ModelRequestRejectedError, TurnFailure.REJECTED),
    )
    error_class = next((name for cls, name in classes if isinstance(error, cls)), TurnFailure.PROVIDER_ERROR)
    status_code = error.status_code if isinstance(error, ModelHTTPError) else None
    return ModelFailure(error_class, status_code, error.retry_after, error.message, error.in_stream)
