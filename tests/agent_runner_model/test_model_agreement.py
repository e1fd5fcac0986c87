"""`LeanOpenAIModel` sends what pydantic-ai's `OpenAIChatModel` sends and assembles what it assembles.

Each case runs one script twice over real HTTP, once per model, each against its own fresh
scripted gateway, and compares the recorded request bodies and the message histories whole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from typing import Any

import pytest
from model_twins import API_KEY, KINDS, MODEL, assert_agree, dump, model_at, run_agent, run_both, stable
from pydantic import BaseModel, TypeAdapter
from pydantic_ai import Agent, ModelRetry, NativeOutput, PromptedOutput, RunContext
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from support.model_gateway import ModelGateway, ToolCall, Turn

LONG_TEXT = "".join(f"word{n} " for n in range(200))


def clock_agent(model: Model) -> Agent[None, str]:
    agent = Agent(model, system_prompt="You tell the time.", instructions="Answer in one sentence.")

    @agent.tool_plain
    def get_time(tz: str) -> str:
        """Get the current time in a time zone."""
        return f"12:00 in {tz}"

    @agent.tool_plain
    def get_date(tz: str, fmt: str = "iso") -> str:
        """Get today's date."""
        return f"2026-01-01 ({fmt}) in {tz}"

    return agent


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_plain_text_agrees(stream: bool) -> None:
    script = [Turn.say(LONG_TEXT, chunk_size=4)]
    reference, lean = await run_both(script, lambda m: Agent(m), "Say many words.", stream=stream)
    assert_agree(reference, lean)
    assert lean.output == LONG_TEXT
    assert lean.requests[0]["stream"] is stream  # explicit both ways: 9Router streams when it is missing
    assert ("stream_options" in lean.requests[0]) is stream
    response = lean.messages[-1]
    assert isinstance(response, ModelResponse)
    assert response.provider_url == lean.url + "/"
    assert response.provider_name == "ninerouter"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_tool_call_then_text_agrees(stream: bool) -> None:
    script = [Turn.call(ToolCall("get_time", {"tz": "UTC"}, id="call_a")), Turn.say("It is noon in UTC.")]
    reference, lean = await run_both(script, clock_agent, "What time is it?", stream=stream)
    assert_agree(reference, lean)
    tool_message = lean.requests[1]["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "call_a", "content": "12:00 in UTC"}
    assert lean.output == "It is noon in UTC."


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_parallel_tool_calls_agree(stream: bool) -> None:
    script = [
        Turn.call(
            ToolCall("get_time", {"tz": "UTC"}, id="call_a"),
            ToolCall("get_date", {"tz": "CET", "fmt": "long"}, id="call_b"),
            ToolCall("get_time", {"tz": "JST"}, id="call_c"),
        ),
        Turn.say("Done."),
    ]
    reference, lean = await run_both(script, clock_agent, "Time and date everywhere?", stream=stream)
    assert_agree(reference, lean)
    calls = [p for m in lean.messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
    assert [(c.tool_call_id, c.tool_name, c.args_as_dict()) for c in calls] == [
        ("call_a", "get_time", {"tz": "UTC"}),
        ("call_b", "get_date", {"tz": "CET", "fmt": "long"}),
        ("call_c", "get_time", {"tz": "JST"}),
    ]


async def test_tool_arguments_in_many_chunks_agree() -> None:
    tz = "America/Argentina/ComodRivadavia" * 8
    script = [Turn.call(ToolCall("get_time", {"tz": tz}, id="call_a"), chunk_size=1), Turn.say("Late.", chunk_size=1)]
    reference, lean = await run_both(script, clock_agent, "Time?", stream=True)
    assert_agree(reference, lean)
    call = next(p for p in lean.messages[1].parts if isinstance(p, ToolCallPart))
    assert json.loads(call.args_as_json_str()) == {"tz": tz}
    # The reference sees one event per argument chunk; ours merges those that arrive together.
    arg_deltas = [e for e in lean.events if isinstance(e, PartDeltaEvent) and e.index == call_index(lean.events)]
    ref_arg_deltas = [
        e for e in reference.events if isinstance(e, PartDeltaEvent) and e.index == call_index(reference.events)
    ]
    assert len(ref_arg_deltas) >= len(json.dumps({"tz": tz}, separators=(",", ":"))) - 1
    assert len(arg_deltas) < len(ref_arg_deltas)


def call_index(events: list[Any]) -> int:
    return next(e.index for e in events if isinstance(e, PartStartEvent) and isinstance(e.part, ToolCallPart))


def history() -> list[ModelMessage]:
    """Two earlier turns: system prompts, a tool call with its return, a parallel pair, and text."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are popagent."),
                SystemPromptPart("The user is in Lisbon."),
                UserPromptPart("What time is it?"),
            ]
        ),
        ModelResponse(
            parts=[TextPart("Let me check."), ToolCallPart("get_time", {"tz": "Europe/Lisbon"}, tool_call_id="h1")],
            provider_name="ninerouter",
        ),
        ModelRequest(parts=[ToolReturnPart("get_time", "09:00 in Europe/Lisbon", tool_call_id="h1")]),
        ModelResponse(parts=[TextPart("It is 09:00.")], provider_name="ninerouter"),
        ModelRequest(parts=[UserPromptPart(["And the date?", "Also in Tokyo."])]),
        ModelResponse(
            parts=[
                ToolCallPart("get_date", '{"tz": "Europe/Lisbon"}', tool_call_id="h2"),
                ToolCallPart("get_date", {"tz": "Asia/Tokyo"}, tool_call_id="h3"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("get_date", "2026-01-01", tool_call_id="h2"),
                ToolReturnPart("get_date", {"date": "2026-01-02"}, tool_call_id="h3"),
            ]
        ),
        ModelResponse(parts=[TextPart("January 1st; already the 2nd in Tokyo.")]),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_history_with_system_prompts_and_tool_returns_agrees(stream: bool) -> None:
    script = [Turn.call(ToolCall("get_time", {"tz": "Asia/Tokyo"}, id="call_t")), Turn.say("18:00 there.")]
    reference, lean = await run_both(
        script, clock_agent, "And the time in Tokyo?", stream=stream, message_history=history()
    )
    assert_agree(reference, lean)
    roles = [m["role"] for m in lean.requests[0]["messages"]]
    assert roles == [
        *("system", "system", "system", "user", "assistant", "tool", "assistant", "user"),
        *("assistant", "tool", "tool", "assistant", "user"),
    ]


class Meeting(BaseModel):
    title: str
    minutes: int


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_retry_prompts_agree(stream: bool) -> None:
    """A tool's `ModelRetry` goes back as its tool result; an output validator's as user text."""

    def build(model: Model) -> Agent[None, str]:
        agent = clock_agent(model)

        @agent.tool_plain(retries=2)
        def check_zone(tz: str) -> str:
            """Check that a time zone exists."""
            if "/" not in tz:
                raise ModelRetry(f"{tz!r} is not an IANA zone; use Area/City.")
            return "ok"

        @agent.output_validator
        def must_mention_zone(ctx: RunContext[None], output: str) -> str:
            if "Lisbon" not in output:
                raise ModelRetry("Name the zone you checked.")
            return output

        return agent

    script = [
        Turn.call(ToolCall("check_zone", {"tz": "Lisbon"}, id="call_bad")),
        Turn.call(ToolCall("check_zone", {"tz": "Europe/Lisbon"}, id="call_good")),
        Turn.say("The zone is fine."),
        Turn.say("Europe/Lisbon is fine."),
    ]
    reference, lean = await run_both(script, build, "Is Lisbon a zone?", stream=stream)
    assert_agree(reference, lean)
    retried_tool = lean.requests[1]["messages"][-1]
    assert retried_tool["role"] == "tool" and retried_tool["tool_call_id"] == "call_bad"
    assert "not an IANA zone" in retried_tool["content"]
    assert "Name the zone you checked." in json.dumps(lean.requests[3]["messages"][-1])


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_structured_output_tool_with_retry_agrees(stream: bool) -> None:
    script = [
        Turn.call(ToolCall("final_result", {"title": "Standup"}, id="call_1")),
        Turn.call(ToolCall("final_result", {"title": "Standup", "minutes": 15}, id="call_2")),
    ]
    reference, lean = await run_both(script, lambda m: Agent(m, output_type=Meeting), "Plan a standup.", stream=stream)
    assert_agree(reference, lean)
    assert lean.output == Meeting(title="Standup", minutes=15)


@pytest.mark.parametrize("output_type", [NativeOutput(Meeting), PromptedOutput(Meeting)], ids=["native", "prompted"])
async def test_native_and_prompted_output_agree(output_type: Any) -> None:
    script = [Turn.say('{"title": "Review", "minutes": 30}')]
    reference, lean = await run_both(script, lambda m: Agent(m, output_type=output_type), "Plan.", stream=True)
    assert_agree(reference, lean)
    assert lean.output == Meeting(title="Review", minutes=30)
    assert "response_format" in lean.requests[0]


TOOLS = [
    ToolDefinition(
        name="get_time",
        description="Get the time.",
        parameters_json_schema={"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    ),
    ToolDefinition(name="noop", parameters_json_schema={"type": "object", "properties": {}}, strict=True),
]

SETTINGS_CASES: dict[str, ModelSettings] = {
    "sampling": {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 7,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "logit_bias": {"42": 1},
        "stop_sequences": ["\n\nUser:"],
    },
    "tools": {"parallel_tool_calls": False, "tool_choice": "required"},
    "one_tool": {"tool_choice": ["get_time"]},
    "some_tools": {"tool_choice": ["get_time", "noop"], "parallel_tool_calls": True},
    "no_tools": {"tool_choice": "none"},
    "extras": {"extra_body": {"top_k": 5, "min_p": 0.1}, "extra_headers": {"X-Trace": "t1"}, "service_tier": "flex"},
}


@pytest.mark.parametrize("case", sorted(SETTINGS_CASES))
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_model_settings_map_to_the_same_request(case: str, stream: bool) -> None:
    settings = SETTINGS_CASES[case]
    params = ModelRequestParameters(function_tools=TOOLS, allow_text_output=True)
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Hi")], instructions="Be kind.")]
    bodies: dict[str, dict[str, Any]] = {}
    responses: dict[str, Any] = {}
    for kind in KINDS:
        async with ModelGateway([Turn.say("Hello there.")], api_key=API_KEY) as gw, model_at(kind, gw.url) as model:
            if stream:
                async with model_request_stream(
                    model, messages, model_settings=settings, model_request_parameters=params
                ) as s:
                    async for _ in s:
                        pass
                    response = s.get()
            else:
                response = await model_request(
                    model, messages, model_settings=settings, model_request_parameters=params
                )
            bodies[kind] = gw.requests[0]
            responses[kind] = dump([response])
    assert bodies["lean"] == bodies["reference"]
    assert responses["lean"] == responses["reference"]
    assert bodies["lean"]["model"] == MODEL


async def test_same_events_when_nothing_is_merged() -> None:
    """With a zero merge window every delta is handed over alone: the event sequence is the reference's."""
    script = [
        Turn.call(ToolCall("get_time", {"tz": "UTC"}, id="call_a"), text="Checking the clock. ", chunk_size=3),
        Turn.say("Noon.", chunk_size=2),
    ]
    reference = await run_agent("reference", script, clock_agent, "Time?", stream=True)
    events: list[AgentStreamEvent] = []

    async def collect(_ctx: Any, stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            events.append(event)

    async with (
        ModelGateway(list(script), api_key=API_KEY) as gw,
        model_at("lean", gw.url, coalesce_window=0.0) as model,
    ):
        await clock_agent(model).run("Time?", event_stream_handler=collect)
    assert [dump_event(e) for e in events] == [dump_event(e) for e in reference.events]
    assert sum(isinstance(e, PartDeltaEvent) for e in events) > 10


def dump_event(event: AgentStreamEvent) -> Any:
    return stable(EVENTS.dump_python(event, mode="json"))


EVENTS: TypeAdapter[AgentStreamEvent] = TypeAdapter(AgentStreamEvent)
