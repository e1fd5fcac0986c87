"""What several observability test modules share: a gateway reading this process's store, spans to store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from popagent_core.span_store import SpanStoreProcessor, active_stats
from popagent_gateway.settings import Settings as GatewaySettings
from support.model_gateway import ToolCall, Turn
from support.stacks import API_KEY, Stack, serve_gateway


@contextlib.asynccontextmanager
async def reading_gateway(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway on the stack's services that reads the store this test process really exports to.

    Several stacks share one test process and its one exporter (the first gateway started it), so
    the stack's own observability database may hold none of this process's spans.
    """
    stats = active_stats()
    assert stats is not None and stats.store_dsn
    settings = GatewaySettings(**{**stack.gateway_env, "OBSERVABILITY_DATABASE_URL": stats.store_dsn})
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=30.0) as client,
    ):
        yield client


def script_a_delegated_tool_call(stack: Stack) -> None:
    """The models' side of a turn that delegates to the researcher, who calls getTime before answering."""
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Find the time."}, id="call-d")),
        Turn.call(ToolCall("getTime", {}, id="call-inner")),
        Turn.say("It is noon."),
        Turn.say("The researcher says it is noon."),
    )


def spans(count: int, prefix: str) -> list[ReadableSpan]:
    collected: list[ReadableSpan] = []

    class Keep(SpanStoreProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            collected.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Keep())
    tracer = provider.get_tracer("test")
    for index in range(count):
        tracer.start_span(f"{prefix}-{index}").end()
    return collected
