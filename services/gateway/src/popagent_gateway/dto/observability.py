"""/api/observability: the overview figures, traces and their span trees, stored logs, the store's health."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from popagent_gateway.dto import WireInput, WireModel

TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
# A list's nextCursor: the last row's time (microseconds since 1970, UTC) and id. Every string
# of this shape is a position in the list, so the pattern says all a client can get wrong.
KEYSET_CURSOR_PATTERN = r"^[0-9]{1,17}~[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
KEYSET_CURSOR_DESCRIPTION = "nextCursor of the previous page"
MAX_WINDOW_DAYS = 366
MAX_FEEDBACK_COMMENT_CHARS = 2000


def _not_a_number(value: object) -> object:
    """pydantic takes a number as Unix time; the document says ISO 8601, so a number is refused."""
    if isinstance(value, int | float) or (isinstance(value, str) and _looks_numeric(value)):
        raise ValueError("must be an ISO 8601 date-time with a zone, not a number")
    return value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# A query's date-time: ISO 8601 only.
IsoDateTime = Annotated[datetime, BeforeValidator(_not_a_number)]


class WindowQuery(BaseModel):
    """A time window: `until` defaults to now, `since` to 24 hours before `until`."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True)

    since: IsoDateTime | None = Field(
        default=None,
        description="ISO 8601 with a zone; default: 24 h before until. A window longer than 366 days is cut to its "
        "last 366 days; a since at or after until is an empty window",
    )
    until: IsoDateTime | None = Field(default=None, description="ISO 8601 with a zone; default: now")


class OverviewQuery(WindowQuery):
    pass


class TraceListQuery(WindowQuery):
    session_id: str | None = Field(default=None, alias="sessionId", pattern=ID_PATTERN)
    agent_id: str | None = Field(default=None, alias="agentId", pattern=ID_PATTERN, description="any span of the agent")
    status: Literal["ok", "error"] | None = Field(
        default=None, description="error: a span of the trace failed (with kind=turns: the turn itself failed)"
    )
    kind: Literal["all", "turns"] = Field(
        default="all",
        description="turns: only traces of a chat or task turn (what the overview counts), not of other requests",
    )
    cursor: str | None = Field(default=None, pattern=KEYSET_CURSOR_PATTERN, description=KEYSET_CURSOR_DESCRIPTION)
    limit: int = Field(default=50, ge=1, le=200)


class LogListQuery(WindowQuery):
    service: str | None = Field(default=None, max_length=100, description="e.g. popagent-gateway")
    level: Literal["debug", "info", "warning", "error", "critical"] | None = Field(
        default=None, description="this level or worse"
    )
    trace_id: str | None = Field(default=None, alias="traceId", pattern=TRACE_ID_PATTERN)
    # A log row's id: a PostgreSQL bigint, so at most 18 digits are always one.
    cursor: str | None = Field(default=None, pattern=r"^[0-9]{1,18}$", description="nextCursor of the previous page")
    limit: int = Field(default=100, ge=1, le=500)


class TokenUsageOut(WireModel):
    model: str
    agent_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float | None = Field(description="USD, from the catalog's prices; null when no call was priced")


class TurnBucketOut(WireModel):
    started_at: datetime
    turns: int
    errors: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None


class OverviewOut(WireModel):
    since: datetime
    until: datetime
    # A turn is the supervisor's agent.run; an error is a turn that failed.
    turns: int
    errors: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    # Over every model call of the window.
    first_token_p50_ms: float | None
    first_token_p95_ms: float | None
    tokens: list[TokenUsageOut]
    bucket_seconds: int
    # Turns per bucket from `since`, oldest first; buckets without a turn are left out.
    series: list[TurnBucketOut]


class TraceSummaryOut(WireModel):
    trace_id: str
    root_name: str
    started_at: datetime
    ended_at: datetime
    duration_ms: float
    span_count: int
    status: Literal["ok", "error"] = Field(description="error: a span of the trace failed")
    turn_status: Literal["ok", "error"] | None = Field(
        description="the status of the trace's turn (its supervisor run); null: the trace is no turn's"
    )
    session_id: str | None
    agents: list[str]
    services: list[str]


class TraceListOut(WireModel):
    traces: list[TraceSummaryOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last")


class SpanOut(WireModel):
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    service: str
    started_at: datetime
    ended_at: datetime
    duration_ms: float
    status: str
    status_message: str | None
    attributes: dict[str, Any]
    children: list[SpanOut]


class TraceOut(WireModel):
    trace_id: str
    span_count: int
    # Spans whose parent is not stored (the caller's own span, or one dropped while the store was down).
    roots: list[SpanOut]


class LogOut(WireModel):
    id: int
    logged_at: datetime
    level: str
    service: str
    logger: str
    message: str
    trace_id: str | None
    span_id: str | None
    attributes: dict[str, Any]


class LogListOut(WireModel):
    logs: list[LogOut]
    next_cursor: str | None


class ExporterOut(WireModel):
    exported_spans: int
    dropped_spans: int
    exported_logs: int
    dropped_logs: int
    queue_depth: int
    queue_limit: int
    last_error: str


class ProcessExporterOut(WireModel):
    """One process's exporter, from the heartbeat its span store writer upserts every few seconds."""

    service: str
    instance: str = Field(description="host:pid")
    started_at: datetime
    seen_at: datetime
    stale: bool = Field(description="no heartbeat for over 70 s: the process stopped, or cannot reach the store")
    exported_spans: int
    dropped_spans: int
    exported_logs: int
    dropped_logs: int
    queue_depth: int
    queue_limit: int
    last_error: str = Field(description="the last failed write, kept after export resumed; empty: none")
    last_error_at: datetime | None


class ObservabilityHealthOut(WireModel):
    store_reachable: bool
    store_detail: str
    # The gateway process's own exporter, live (it answers even while the store is down).
    exporter: ExporterOut | None = Field(description="null when this process exports to no store (tracing off)")
    processes: list[ProcessExporterOut] = Field(
        description="every process's last heartbeat of the last hour; empty while the store is unreachable"
    )
    covers: str


class FeedbackCreate(WireInput):
    """Thumbs up or down on one assistant message or one turn, linked to the turn's trace."""

    SCHEMA_RULES: ClassVar[dict[str, Any]] = {"anyOf": [{"required": ["messageId"]}, {"required": ["turnId"]}]}

    session_id: str = Field(pattern=ID_PATTERN, max_length=128)
    message_id: str | None = Field(default=None, min_length=1, max_length=200, description="the assistant message")
    turn_id: str | None = Field(default=None, pattern=ID_PATTERN, max_length=128, description="or the turn")
    trace_id: str = Field(pattern=TRACE_ID_PATTERN, description="the message metadata's traceId")
    rating: Literal["up", "down"]
    comment: str = Field(default="", max_length=MAX_FEEDBACK_COMMENT_CHARS)

    @model_validator(mode="after")
    def _on_something(self) -> FeedbackCreate:
        if self.message_id is None and self.turn_id is None:
            raise ValueError("give messageId or turnId")
        return self


class FeedbackListQuery(WindowQuery):
    session_id: str | None = Field(default=None, alias="sessionId", pattern=ID_PATTERN)
    rating: Literal["up", "down"] | None = None
    trace_id: str | None = Field(default=None, alias="traceId", pattern=TRACE_ID_PATTERN)
    cursor: str | None = Field(default=None, pattern=KEYSET_CURSOR_PATTERN, description=KEYSET_CURSOR_DESCRIPTION)
    limit: int = Field(default=50, ge=1, le=200)


class FeedbackOut(WireModel):
    id: str
    created_at: datetime
    rating: Literal["up", "down"]
    comment: str
    session_id: str
    message_id: str | None
    turn_id: str | None
    trace_id: str


class FeedbackListOut(WireModel):
    feedback: list[FeedbackOut]
    next_cursor: str | None
