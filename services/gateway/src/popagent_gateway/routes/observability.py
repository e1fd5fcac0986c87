"""/api/observability: overview, traces, a trace's span tree, stored logs and the store's health.

Read straight from the observability store (OBSERVABILITY_DATABASE_URL) through the gateway's
own pool (`popagent_gateway.observability.store`): the data is written there by every process's
exporter and is no service's, so there is no RPC to make. A store that is down answers 503.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Generic, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from popagent_core.errors import InvalidArgument, NotFound, Unavailable
from popagent_core.span_store import HEARTBEAT_INTERVAL_S, IDLE_HEARTBEAT_S, STALE_HEARTBEAT_S, active_stats
from popagent_gateway.dto.observability import (
    MAX_WINDOW_DAYS,
    TRACE_ID_PATTERN,
    ExporterOut,
    FeedbackCreate,
    FeedbackListOut,
    FeedbackListQuery,
    FeedbackOut,
    LogListOut,
    LogListQuery,
    ObservabilityHealthOut,
    OverviewOut,
    OverviewQuery,
    ProcessExporterOut,
    SpanOut,
    TraceListOut,
    TraceListQuery,
    TraceOut,
    WindowQuery,
)
from popagent_gateway.observability.feedback_events import FeedbackEvents
from popagent_gateway.observability.store import (
    FeedbackFilter,
    LogFilter,
    ObservabilityStore,
    TraceFilter,
)

router = APIRouter(prefix="/observability", tags=["observability"])

DEFAULT_WINDOW = timedelta(hours=24)
# The overview's series has about this many buckets, each a whole number of minutes.
SERIES_BUCKETS = 48


def bucket_seconds(since: datetime, until: datetime) -> int:
    minutes = -(-(until - since).total_seconds() // (SERIES_BUCKETS * 60))
    return int(max(minutes, 1) * 60)


def _store(request: Request) -> ObservabilityStore:
    return request.app.state.observability_store


def _window(query: WindowQuery) -> tuple[datetime, datetime]:
    until = query.until or datetime.now(UTC)
    since = query.since or until - DEFAULT_WINDOW
    if since.tzinfo is None or until.tzinfo is None:
        raise InvalidArgument("since and until must carry a time zone")
    # Both are well-formed requests a schema cannot tell apart from others, so they answer
    # (as documented on `since`) rather than refuse: an empty window, or the last 366 days.
    since = min(max(since, until - timedelta(days=MAX_WINDOW_DAYS)), until)
    return since, until


@router.get("/overview", response_model=OverviewOut)
async def overview(request: Request, query: Annotated[OverviewQuery, Query()]) -> OverviewOut:
    """Turns, failed turns, turn latency, time to first token and tokens by model and agent in the window."""
    since, until = _window(query)
    store = _store(request)
    figures = await store.turn_figures(since, until)
    usage = await store.token_usage(since, until)
    bucket_s = bucket_seconds(since, until)
    series = await store.turn_series(since, until, bucket_s)
    return OverviewOut(
        since=since,
        until=until,
        turns=figures.turns,
        errors=figures.errors,
        latency_p50_ms=figures.p50_ms,
        latency_p95_ms=figures.p95_ms,
        first_token_p50_ms=figures.first_token_p50_ms,
        first_token_p95_ms=figures.first_token_p95_ms,
        tokens=usage,
        bucket_seconds=bucket_s,
        series=series,
    )


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class KeysetPage(Generic[Row]):
    rows: list[Row]
    next_cursor: str | None


def _next_keyset_cursor(at: datetime, last_id: str) -> str:
    """The nextCursor after a row (KEYSET_CURSOR_PATTERN): its time in microseconds, and its id."""
    return f"{(at - EPOCH) // MICROSECOND}~{last_id}"


def _keyset_page(found: list[Row], limit: int, position: Callable[[Row], tuple[datetime, str]]) -> KeysetPage[Row]:
    """A page of a list read `limit + 1` long: its first `limit` rows, and the nextCursor after the last of
    them when there are more (`position`: a row's time and id)."""
    page = found[:limit]
    return KeysetPage(page, _next_keyset_cursor(*position(page[-1])) if len(found) > limit else None)


def _keyset_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    """The position a nextCursor names; the query's pattern has already checked its shape."""
    if cursor is None:
        return None
    micros, _, last_id = cursor.partition("~")
    return EPOCH + int(micros) * MICROSECOND, last_id


@router.get("/traces", response_model=TraceListOut)
async def list_traces(request: Request, query: Annotated[TraceListQuery, Query()]) -> TraceListOut:
    """Traces that started in the window, newest first, by session, agent and status."""
    since, until = _window(query)
    found = await _store(request).traces(
        TraceFilter(
            since=since,
            until=until,
            session_id=query.session_id,
            agent_id=query.agent_id,
            failed=None if query.status is None else query.status == "error",
            turns_only=query.kind == "turns",
            before=_keyset_cursor(query.cursor),
            limit=query.limit + 1,
        )
    )
    page = _keyset_page(found, query.limit, lambda trace: (trace.started_at, trace.trace_id))
    return TraceListOut(traces=page.rows, next_cursor=page.next_cursor)


def span_tree(spans: list[SpanOut]) -> list[SpanOut]:
    """The spans as a forest, children in start order; a span whose parent is not stored is a root."""
    nodes = {span.span_id: span for span in spans}
    roots = []
    for span in spans:  # already in start order
        parent = nodes.get(span.parent_span_id) if span.parent_span_id else None
        (parent.children if parent is not None else roots).append(span)
    return roots


@router.get("/traces/{trace_id}", response_model=TraceOut)
async def get_trace(
    request: Request, trace_id: Annotated[str, Path(pattern=TRACE_ID_PATTERN, description="32 hex digits")]
) -> TraceOut:
    """One trace's stored spans as a tree, across every process that took part."""
    spans = await _store(request).trace_spans(trace_id)
    if not spans:
        raise NotFound(f"no stored span of trace {trace_id}")
    return TraceOut(trace_id=trace_id, span_count=len(spans), roots=span_tree(spans))


@router.get("/logs", response_model=LogListOut)
async def list_logs(request: Request, query: Annotated[LogListQuery, Query()]) -> LogListOut:
    """Stored log records (warnings and errors, and the info loggers the settings select), newest first."""
    since, until = _window(query)
    found = await _store(request).logs(
        LogFilter(
            since=since,
            until=until,
            service=query.service,
            min_level=query.level,
            trace_id=query.trace_id,
            before_id=int(query.cursor) if query.cursor is not None else None,
            limit=query.limit + 1,
        )
    )
    page = found[: query.limit]
    return LogListOut(
        logs=page,
        next_cursor=str(page[-1].id) if len(found) > query.limit else None,
    )


HEALTH_COVERS = (
    "storeReachable: a query from the gateway reaches the store now. exporter: the gateway process's own span"
    " and log exporter, live. processes: each process's exporter as of its last heartbeat, written to the store"
    f" every {HEARTBEAT_INTERVAL_S:g} s while its figures change and every {IDLE_HEARTBEAT_S:g} s while they do"
    f" not (none is read while the store is down; stale: none for {STALE_HEARTBEAT_S:g} s)."
)
HEARTBEATS_WITHIN_S = 3600.0


@router.get("/health", response_model=ObservabilityHealthOut)
async def observability_health(request: Request) -> ObservabilityHealthOut:
    """Whether the store answers, the gateway's live exporter figures, and every process's as of its heartbeat."""
    store = _store(request)
    reachable, detail = await store.reachable()
    processes: list[ProcessExporterOut] = []
    if reachable:
        try:
            processes = await store.exporters(HEARTBEATS_WITHIN_S, STALE_HEARTBEAT_S)
        except Unavailable as exc:
            reachable, detail = False, exc.message
    stats = active_stats()
    exporter = (
        ExporterOut(
            exported_spans=stats.exported,
            dropped_spans=stats.dropped,
            exported_logs=stats.exported_logs,
            dropped_logs=stats.dropped_logs,
            queue_depth=stats.queue_depth,
            queue_limit=stats.queue_limit,
            last_error=stats.last_error,
        )
        if stats is not None
        else None
    )
    return ObservabilityHealthOut(
        store_reachable=reachable, store_detail=detail, exporter=exporter, processes=processes, covers=HEALTH_COVERS
    )


@router.post("/feedback", response_model=FeedbackOut, status_code=201)
async def give_feedback(request: Request, body: FeedbackCreate) -> JSONResponse:
    """Store a thumbs up or down; a thumbs down is also published as an outcome event.

    503 when the store or (for a thumbs down) the event bus cannot take it; nothing is kept then.
    """
    store = _store(request)
    feedback = await store.add_feedback(
        feedback_id=f"fb-{uuid.uuid4().hex}",
        rating=body.rating,
        comment=body.comment,
        session_id=body.session_id,
        message_id=body.message_id,
        turn_id=body.turn_id,
        trace_id=body.trace_id,
    )
    if feedback.rating == "down":
        events: FeedbackEvents = request.app.state.feedback_events
        try:
            await events.negative_feedback_given(feedback.model_dump(mode="json"), feedback_id=feedback.id)
        except BaseException:
            # No event, no feedback: see popagent_gateway.observability.feedback_events.
            await store.remove_feedback(feedback.id)
            raise
    return JSONResponse(feedback.model_dump(mode="json"), status_code=201)


@router.get("/feedback", response_model=FeedbackListOut)
async def list_feedback(request: Request, query: Annotated[FeedbackListQuery, Query()]) -> FeedbackListOut:
    """Feedback given in the window, newest first, by session, rating and trace."""
    since, until = _window(query)
    found = await _store(request).feedback(
        FeedbackFilter(
            since=since,
            until=until,
            session_id=query.session_id,
            rating=query.rating,
            trace_id=query.trace_id,
            before=_keyset_cursor(query.cursor),
            limit=query.limit + 1,
        )
    )
    page = _keyset_page(found, query.limit, lambda feedback: (feedback.created_at, feedback.id))
    return FeedbackListOut(feedback=page.rows, next_cursor=page.next_cursor)
