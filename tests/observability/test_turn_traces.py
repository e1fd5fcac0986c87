"""One chat turn is one trace: gateway request, agent-runner turn, model calls, tools, delegation, hooks."""

from __future__ import annotations

from collections import Counter

from chat.helpers import chat, new_session
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from observability.helpers import script_a_delegated_tool_call
from support.stacks import Stack
from support.tracing import Spans, collecting_spans, hex_trace_id
from support.waiting import eventually


def chat_request_span(spans: Spans) -> ReadableSpan | None:
    found = [s for s in spans.all() if s.name == "POST /api/chat" and s.kind is SpanKind.SERVER]
    return found[0] if found else None


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [parent] = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    return parent


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """Names of the recorded spans above `span`, nearest first (the test client's own request span is not recorded)."""
    names = []
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_a_turn_with_a_delegation_a_tool_and_hooks_is_one_trace(chat_stack: Stack) -> None:
    stack = chat_stack
    script_a_delegated_tool_call(stack)
    with collecting_spans() as spans:
        async with stack.client() as client:
            session = await new_session(client)
            await chat(client, session, "what time is it?")
        request = await eventually(lambda: chat_request_span(spans), what="the chat request span")
        trace_id = request.context.trace_id  # type: ignore[union-attr]
        in_trace = spans.of_trace(trace_id)

    names = Counter(span.name for span in in_trace)
    assert names["agent.run"] == 2  # supervisor and researcher
    assert names["model.generation"] == 4
    assert names["tool.call"] == 2  # the delegation tool and the researcher's getTime
    assert names["delegation"] == 1
    assert names["hook.dispatch"] >= 6  # prompt, tool uses, subagent start/stop, stop
    # Both sides of the gateway -> agent-runner and agent-runner -> hooks calls.
    servers = {span.name for span in in_trace if span.kind is SpanKind.SERVER}
    assert any(
        name.endswith("/StreamChat") or "Chat" in name for name in servers if name.startswith("/popagent.agent_runner")
    )
    assert any(name.startswith("/popagent.hooks") for name in servers)

    by_name = {span.name: [s for s in in_trace if s.name == span.name] for span in in_trace}
    supervisor = next(s for s in by_name["agent.run"] if s.attributes["gen_ai.agent.id"] == "popagent")  # type: ignore[index]
    researcher = next(s for s in by_name["agent.run"] if s.attributes["gen_ai.agent.id"] == "researcher")  # type: ignore[index]
    assert supervisor.attributes["popagent.turn.outcome"] == "answered"  # type: ignore[index]
    assert ancestors(researcher, in_trace)[:3] == ["delegation", "tool.call", "agent.run"]
    [get_time] = [s for s in by_name["tool.call"] if s.attributes["gen_ai.tool.name"] == "getTime"]  # type: ignore[index]
    assert get_time.attributes["popagent.tool.outcome"] == "success"  # type: ignore[index]
    assert ancestors(get_time, in_trace)[0] == "agent.run"
    assert parent_of(get_time, in_trace) is researcher
    assert "POST /api/chat" in ancestors(supervisor, in_trace)

    generation = by_name["model.generation"][0]
    attributes = generation.attributes or {}
    assert attributes["gen_ai.request.model"] == "fake/fake-chat"
    assert attributes["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
    assert attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
    assert attributes["gen_ai.response.finish_reasons"] in (("tool_call",), ("tool_calls",))
    assert attributes["gen_ai.response.time_to_first_chunk"] >= 0  # type: ignore[operator]

    hook_events = {span.attributes["popagent.hook.event"] for span in by_name["hook.dispatch"]}  # type: ignore[index]
    assert {"UserPromptSubmit", "PreToolUse", "SubagentStart", "SubagentStop", "Stop"} <= hook_events
    assert all(span.attributes["popagent.hook.outcome"] == "pass" for span in by_name["hook.dispatch"])  # type: ignore[index]
    assert len({hex_trace_id(span) for span in in_trace}) == 1
    # A query span is named by its SQL operation and its statement names the query, never by the
    # documentation comment a queries file keeps above it.
    queries = [s for s in in_trace if (s.attributes or {}).get("db.system") == "postgresql"]
    assert queries and not any(s.name.startswith("--") for s in queries)
    assert any(str((s.attributes or {}).get("db.statement", "")).startswith("/* turn_prelude */") for s in queries)


async def test_a_specialists_run_span_names_its_own_thread_not_the_chats(chat_stack: Stack) -> None:
    # A specialist works on a thread of its own (stored as a child of the chat's); its `agent.run`
    # span carries that thread's id, so a trace leads to the specialist's stored messages.
    stack = chat_stack
    script_a_delegated_tool_call(stack)
    with collecting_spans() as spans:
        async with stack.client() as client:
            session = await new_session(client)
            chunks = await chat(client, session, "what time is it?")
        request = await eventually(lambda: chat_request_span(spans), what="the chat request span")
        in_trace = spans.of_trace(request.context.trace_id)  # type: ignore[union-attr]
    runs = {str(s.attributes["gen_ai.agent.id"]): s for s in in_trace if s.name == "agent.run"}  # type: ignore[index]
    activity = [c["data"] for c in chunks if isinstance(c, dict) and c["type"] == "data-agentActivity"][-1]
    specialist_thread = activity["threadId"]
    assert runs["popagent"].attributes["popagent.thread_id"] == session  # type: ignore[index]
    assert runs["researcher"].attributes["popagent.thread_id"] == specialist_thread != session  # type: ignore[index]
    async with stack.db() as db:
        stored = await db.fetchrow(
            "SELECT resource_id, parent_id FROM popagent_threads WHERE id = $1", specialist_thread
        )
    assert stored is not None and tuple(stored) == ("popagent-specialist:researcher", session)
