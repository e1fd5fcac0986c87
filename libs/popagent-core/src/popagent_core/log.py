"""The one JSON log formatter, with request/turn/trace ids from context variables.

A line's message, traceback and extra fields have their credentials redacted
(`popagent_core.secret_text`): a log line is text written down, like a memory or an event.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from typing import Any

import orjson
from opentelemetry import trace

from popagent_core.secret_text import names_id, redact_secrets

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
turn_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("turn_id", default=None)
trace_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def span_ids() -> dict[str, str]:
    """`trace_id` and `span_id` of the span current where a line is logged (none outside a recorded span)."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return {}
    return {
        "trace_id": trace.format_trace_id(span_context.trace_id),
        "span_id": trace.format_span_id(span_context.span_id),
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, service, logger, message, ids, extra fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": redact_secrets(record.getMessage()),
        }
        for key, var in (("request_id", request_id_var), ("turn_id", turn_id_var), ("trace_id", trace_id_var)):
            value = var.get()
            if value:
                entry[key] = value
        entry.update(span_ids())
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = _field(key, value)
        if record.exc_info:
            entry["exc"] = redact_secrets(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


def _field(name: str, value: Any) -> Any:
    # By its text only: a field named `secret` here is a secret's name in the secrets service's
    # audit lines (the store, which keeps no such audit, redacts such fields by their name).
    if isinstance(value, str) and not names_id(name):
        return redact_secrets(value)
    return value


# Third-party loggers kept at WARNING unless the service's level is higher: at INFO they drown the
# service's own lines, and some write what they carry (pygls' JSON-RPC logger logs every message
# to and from a language server, file contents included).
QUIET_LOGGERS = (
    "httpx",
    "httpcore",
    "nats",
    "asyncio",
    "grpc",
    "pygls",
    "urllib3",
    "docker",
    "openai",
    "python_multipart",
)


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
