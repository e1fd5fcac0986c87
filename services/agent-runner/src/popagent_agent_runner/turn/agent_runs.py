"""Running a turn's agents: model requests unstreamed for pydantic-ai, tool execution streamed.

`Agent.run(event_stream_handler=...)` streams every node, the model's response included, through
pydantic-ai's stream machinery (parts manager, agent stream, several layers of async generators),
which would be most of what a chat turn costs the runner (`bench/chat.py` shows it). A turn does not need it: the lean model hands streamed text to the
turn's sink itself (`llm.stream`), and when a sink is set its `request()` streams from the server
and answers pydantic-ai with the finished response. So here only a tool-execution node that has tool
calls is streamed, for its call and result events (the UI's tool parts, a specialist's tool outcomes);
every other node runs as `agent.run` would run it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from opentelemetry.trace import Span
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.messages import AgentStreamEvent, ModelMessage

from popagent_agent_runner.llm.model import generation_attributes
from popagent_core.telemetry import TRACER

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")
ToolEvents = Callable[[AsyncIterable[AgentStreamEvent]], Awaitable[None]]
StepProgress = Callable[[list[ModelMessage], bool], Awaitable[None]]


@contextmanager
def agent_run_span(agent_id: str, session_id: str, thread_id: str, model: str) -> Iterator[Span]:
    """The `agent.run` span of one agent's run in a turn (supervisor or specialist), GenAI conventions.

    Its model calls' `model.generation` spans name the same agent and conversation.
    """
    identity = {"gen_ai.agent.id": agent_id, "gen_ai.conversation.id": session_id}
    with TRACER.start_as_current_span(
        "agent.run",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_id,
            "gen_ai.request.model": model,
            "popagent.thread_id": thread_id,
            **identity,
        },
    ) as span:
        token = generation_attributes.set(identity)
        try:
            yield span
        finally:
            generation_attributes.reset(token)


async def run_agent(
    agent: Agent[DepsT, OutputT],
    prompt: Any,
    *,
    tool_events: ToolEvents,
    on_step: StepProgress | None = None,
    **run_options: Any,
) -> AgentRunResult[OutputT]:
    """`agent.run(prompt, **run_options)`, with the events of each tool-execution step handed to `tool_events`.

    `on_step(messages, in_flight)` gets the run's new messages at each tool step's edges: before its
    calls run (`in_flight`: the last message is the response whose calls are about to run) and once
    their results are in (the last message is the request carrying them)."""
    async with agent.iter(prompt, **run_options) as run:
        tools_ran = False
        async for node in run:
            if tools_ran and on_step is not None and Agent.is_model_request_node(node):
                await on_step([*run.new_messages(), node.request], False)
            tools_ran = False
            # Only a step with tool calls has events to hand on (pydantic-ai's `_run_stream` yields
            # none for a text answer), and streaming a step is not free.
            if Agent.is_call_tools_node(node) and node.model_response.tool_calls:
                if on_step is not None:
                    await on_step(run.new_messages(), True)
                async with node.stream(run.ctx) as events:
                    await tool_events(events)
                    # Whatever the handler left unread, so the step finishes.
                    async for _ in events:
                        pass
                tools_ran = True
    if run.result is None:
        raise RuntimeError("the agent run ended without a result")
    return run.result
