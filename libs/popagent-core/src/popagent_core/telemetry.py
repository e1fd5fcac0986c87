"""OpenTelemetry in every process: one tracer provider, W3C trace context across gRPC and NATS.

    configure_telemetry("tasks")          # at process start (lifecycle.run, the gateway's main)
    with TRACER.start_as_current_span("task.attempt", attributes={...}): ...

Trace context crosses processes in the standard `traceparent`/`tracestate` carriers: gRPC
metadata (the grpc aio instrumentation's interceptors, installed by `grpc_server` and
`grpc_client` unless tracing is off), and NATS message headers (`inject_headers` when
publishing, `extracted` when consuming). An outbox row stores the context of the transaction
that wrote it, so the relayed message continues the trace of the state change, not of the
relay's loop.

Spans of our own go through `TRACER`; with no provider configured (a library caller, or
`OTEL_SDK_DISABLED=true`) the API hands out non-recording spans, which cost a few hundred
nanoseconds each. The streaming path opens spans per model call and per tool call, never per
chunk: a chunk only touches the span when it is the first (time to first token).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import sys
from collections.abc import Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode

TRACER = trace.get_tracer("popagent")

# The standard switch (`OTEL_SDK_DISABLED`), honoured here since the SDK leaves it to the distro.
_DISABLED_VARIABLE = "OTEL_SDK_DISABLED"
_OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# The standard sampler variables; the SDK reads them only when no sampler is given, and one always is.
SAMPLER_VARIABLE = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_VARIABLE = "OTEL_TRACES_SAMPLER_ARG"

_libraries_instrumented = False


def tracing_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(_DISABLED_VARIABLE, "").strip().lower() not in {"true", "1", "yes"}


def instrument_libraries(*, httpx: bool = True) -> None:
    """Spans for every asyncpg query and (with `httpx`) httpx request of the process (idempotent: the
    patches are global). The dependency checks are skipped: the versions are pinned together."""
    global _libraries_instrumented
    if _libraries_instrumented:
        return
    _asyncpg_instrumentor().instrument(skip_dep_check=True)
    if httpx:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor().instrument(skip_dep_check=True)
    _libraries_instrumented = True


def _asyncpg_instrumentor() -> BaseInstrumentor:
    """The standard asyncpg instrumentation, asked only about statements whose span could be recorded.

    For every statement the library finds the operation's name (splitting the whole SQL text), builds
    the span's attributes and starts a span, and only then does the sampler drop it: a statement
    outside a recorded trace (a background loop's polling, such as the outbox relay after every
    commit) and asyncpg's own transaction statements are never recorded (`SAMPLER`). That work
    cost a busy agent-runner more CPU than the statements it does record; those calls now go
    straight to asyncpg. A statement in a recorded trace gets the library's span, unchanged. The
    overridden methods are the library's wrappers, whose names hold for the pinned version.
    """
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    def unrecorded(query: object) -> bool:
        return query in TRANSACTION_STATEMENTS or not trace.get_current_span().is_recording()

    class RecordedStatementsOnly(AsyncPGInstrumentor):
        _instance = None  # the base class keeps one instance per class; not the base's

        async def _do_execute(self, func, instance, args, kwargs):  # type: ignore[no-untyped-def]
            if unrecorded(args[0] if args else None):
                return await func(*args, **kwargs)
            return await super()._do_execute(func, instance, args, kwargs)

        async def _do_cursor_execute(self, func, instance, args, kwargs):  # type: ignore[no-untyped-def]
            if unrecorded(instance._query):
                return await func(*args, **kwargs)
            return await super()._do_cursor_execute(func, instance, args, kwargs)

        async def _do_prepared_execute(self, func, instance, args, kwargs):  # type: ignore[no-untyped-def]
            if unrecorded(instance._query):
                return await func(*args, **kwargs)
            return await super()._do_prepared_execute(func, instance, args, kwargs)

    return RecordedStatementsOnly()


# How the standard health service's full method names start (as both sides of a call see them).
_HEALTH_METHODS = "/grpc.health.v1.Health/"


def not_health_check(details: object) -> bool:
    """The gRPC tracing interceptors' filter: every call but the health service's (probes every few
    seconds, each a trace of its own otherwise).

    The library's `filters.negate(filters.health_check())` decides the same by runtime type checks
    of the call details and a path split, on every call and on both sides (more CPU than the
    rest of the client interceptor's bookkeeping); this reads the method name, which both the
    server's and the aio client's details carry (bytes on some gRPC versions).
    """
    method = getattr(details, "method", "")
    if isinstance(method, bytes):
        method = method.decode()
    return not method.startswith(_HEALTH_METHODS)


# Ids come from a generator of their own, not the `random` module's shared state: code that seeds
# or checks that state (a property-based test of the gateway) must not see a request's spans in it.
_ids = random.Random()


class _OwnRandomIds(IdGenerator):
    def generate_span_id(self) -> int:
        return _ids.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return _ids.getrandbits(128) or 1


class _NoParentlessClientSpans(Sampler):
    """Root spans only for work that starts somewhere: a request served, a message consumed, our own spans.

    A query or HTTP call with no span around it is a background loop's polling (the outbox relay
    every second, the task claimer, the retention sweeps): traced, each would be a trace of its own.
    """

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):  # type: ignore[no-untyped-def]
        sampler = ALWAYS_OFF if kind is SpanKind.CLIENT else ALWAYS_ON
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "NoParentlessClientSpans"


# asyncpg's transaction statements: they take no time a span would show and are a third of a turn's
# SQL spans (each one recorded, exported and stored); the statements between them keep theirs.
TRANSACTION_STATEMENTS = frozenset({"BEGIN;", "COMMIT;", "ROLLBACK;", "BEGIN", "COMMIT", "ROLLBACK"})


class _NoTransactionStatements(Sampler):
    """`ParentBased` for every span, except the transaction statements' client spans, never recorded."""

    def __init__(self, delegate: Sampler) -> None:
        self.delegate = delegate

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):  # type: ignore[no-untyped-def]
        sampler = ALWAYS_OFF if kind is SpanKind.CLIENT and name in TRANSACTION_STATEMENTS else self.delegate
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "NoTransactionStatements"


# A remote parent's "not sampled" flag does not decide either: it is what a client's dropped
# parentless call sends (a background loop's RPC, an instrumented HTTP client), and the request
# it makes is work this process does all the same.
SAMPLER = _NoTransactionStatements(
    ParentBased(root=_NoParentlessClientSpans(), remote_parent_not_sampled=_NoParentlessClientSpans())
)


class _RatioOfRoots(Sampler):
    """A root that starts somewhere (as `_NoParentlessClientSpans`) is kept for a share of trace ids."""

    def __init__(self, ratio: float) -> None:
        self.ratio = TraceIdRatioBased(ratio)

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):  # type: ignore[no-untyped-def]
        sampler = ALWAYS_OFF if kind is SpanKind.CLIENT else self.ratio
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"RatioOfRoots{{{self.ratio.rate}}}"


def ratio_sampler(ratio: float) -> Sampler:
    """A share of the traces, decided by the trace id alone: every process that sees a trace id makes
    the same choice, so a turn is recorded in all its processes or in none, whatever flag a caller
    sent (an instrumented HTTP client sends "not sampled" for calls it did not record). Under a
    local parent the parent decides; transaction statements and parentless client spans stay out."""
    ratio_of_roots = _RatioOfRoots(ratio)
    return _NoTransactionStatements(
        ParentBased(
            root=ratio_of_roots,
            remote_parent_sampled=TraceIdRatioBased(ratio),
            remote_parent_not_sampled=ratio_of_roots,
        )
    )


_SAMPLER_NAMES = (
    "always_on",
    "parentbased_always_on",
    "always_off",
    "parentbased_always_off",
    "traceidratio",
    "parentbased_traceidratio",
)


def sampler_from(environ: Mapping[str, str] = os.environ) -> Sampler:
    """The sampler `OTEL_TRACES_SAMPLER` (and `_ARG`) ask for; ValueError naming the variable otherwise.

    Unset or `(parentbased_)always_on`: every trace (`SAMPLER`). `(parentbased_)traceidratio` with
    `OTEL_TRACES_SAMPLER_ARG` in [0, 1] (1 when unset, as the specification says): that share of
    traces (`ratio_sampler`); `(parentbased_)always_off`: ratio 0. Both spellings of each mean the
    same here: the decision follows the trace id, so the processes of one turn never disagree.
    """
    name = environ.get(SAMPLER_VARIABLE, "").strip().lower()
    if name not in ("", *_SAMPLER_NAMES):
        raise ValueError(f"{SAMPLER_VARIABLE}={name!r} is not one of {', '.join(_SAMPLER_NAMES)}")
    if name in ("", "always_on", "parentbased_always_on"):
        return SAMPLER
    if name.endswith("always_off"):
        return ratio_sampler(0.0)
    raw = environ.get(SAMPLER_ARG_VARIABLE, "").strip() or "1"
    try:
        ratio = float(raw)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{SAMPLER_ARG_VARIABLE}={raw!r} must be a number from 0 to 1 (the share of traces kept)")
    return ratio_sampler(ratio)


# The name every named query is sent with (`db.load_queries`: a leading `/* name */`).
_QUERY_NAME = re.compile(r"/\* (\w+) \*/")


class NamedStatementSpans(SpanProcessor):
    """A statement's span says which query it is: `SELECT thread_history`, `WITH list_traces`.

    The asyncpg instrumentation names a statement's span by its first keyword only, so every query
    that starts with a common table expression was a span named `WITH`, and the rest were all
    `SELECT`, `INSERT`... Our queries carry their name in a leading comment; it is appended.
    """

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        if span.kind is not SpanKind.CLIENT or span.attributes is None:
            return
        statement = span.attributes.get("db.statement")
        if isinstance(statement, str) and statement.startswith("/* "):
            named = _QUERY_NAME.match(statement)
            if named is not None:
                span.update_name(f"{span.name} {named.group(1)}")


def build_provider(
    service: str, *, processors: tuple[SpanProcessor, ...] = (), sampler: Sampler = SAMPLER
) -> TracerProvider:
    """The process's provider: `service.name` = popagent-<service>; OTLP/HTTP export when the standard
    variables name an endpoint (the exporter reads them itself: endpoint, headers, timeout)."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"popagent-{service}"}), sampler=sampler, id_generator=_OwnRandomIds()
    )
    provider.add_span_processor(NamedStatementSpans())
    for processor in processors:
        provider.add_span_processor(processor)
    if any(os.environ.get(name) for name in _OTLP_VARIABLES):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def configure_telemetry(service: str) -> TracerProvider | None:
    """Install the process's tracer provider and library instrumentation; None when tracing is off.

    httpx is instrumented only in a process that has loaded it by now (its service's modules are
    imported before `lifecycle.run` starts): the others make no HTTP call, and the instrumentation
    (with the second HTTP library it imports) costs every process that loads it memory
    (bench/startup.py prints each service's idle RSS).
    """
    if not tracing_enabled():
        return None
    try:
        sampler = sampler_from()
    except ValueError as error:
        sys.stderr.write(f"popagent-{service}: bad configuration: {error}\n")
        raise SystemExit(2) from None
    provider = build_provider(service, sampler=sampler)
    trace.set_tracer_provider(provider)
    instrument_libraries(httpx="httpx" in sys.modules)
    return provider


def shutdown_telemetry() -> None:
    """Flush what the batch processors hold (bounded by their own export timeouts)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


@contextlib.contextmanager
def statements_span(operation: str) -> Iterator[None]:
    """One client span for a unit of SQL statements (a transaction on a turn's path), none per statement.

    A chat turn stores its prompt and its answer in two transactions of five to eight statements:
    each statement's span cost more to record, export and store than the statement took. The block
    runs with library instrumentation suppressed, so it must hold database work only (no RPC: its
    client span and trace header would be suppressed too). Outside a recorded trace it does nothing.
    """
    if not trace.get_current_span().is_recording():
        yield
        return
    with (
        TRACER.start_as_current_span(
            f"db.{operation}",
            kind=SpanKind.CLIENT,
            attributes={"db.system.name": "postgresql", "db.operation.name": operation},
            record_exception=False,
            set_status_on_exception=False,
        ) as span,
        suppress_instrumentation(),
    ):
        try:
            yield
        except Exception as error:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attribute("error.type", type(error).__qualname__)
            raise


def current_trace_id() -> str | None:
    """The 32-hex trace id of the active span, or None outside a recorded trace."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return trace.format_trace_id(span_context.trace_id)


def continuing_trace(trace_id: str | None) -> otel_context.Context | None:
    """A context whose spans join the trace `trace_id` (32 hex), one a record stored earlier named.

    A background task's row gets its trace id when it is claimed; the attempt's spans, its hooks and
    its turn all carry that id, though nothing was in flight to propagate it from. None (the current
    context) for a missing or malformed id.
    """
    if not trace_id or len(trace_id) != 32:
        return None
    try:
        value = int(trace_id, 16)
    except ValueError:
        return None
    if value == 0:
        return None
    parent = trace.SpanContext(
        trace_id=value,
        span_id=_ids.getrandbits(64) or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """`headers` plus the active trace context (`traceparent`, `tracestate`), for a NATS message or outbox row."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def extracted(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Run the block in the trace context a message carried (no-op when it carried none)."""
    if not headers or "traceparent" not in headers:
        yield
        return
    token = otel_context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        otel_context.detach(token)
