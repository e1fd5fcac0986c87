"""The scripted model server as real clients see it: the openai SDK and pydantic-ai's OpenAIChatModel."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from support.model_gateway import ModelGateway, ToolCall, Turn, Usage

KEY = "sk-test-key"
MODEL = "fake/fake-chat"


def sdk(gw: ModelGateway, *, max_retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url, api_key=KEY, max_retries=max_retries)


def agent_for(gw: ModelGateway) -> Agent[None, str]:
    # No SDK retries: an error turn must surface, not be retried into the next turn.
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=sdk(gw)))
    agent = Agent(model, instructions="Answer briefly.")

    @agent.tool_plain
    def getTime(tz: str) -> str:  # the registry key the model sees
        """Current time in a time zone."""
        return f"12:00 in {tz}"

    return agent


# -- the openai SDK -----------------------------------------------------------------


async def test_openai_sdk_assembles_a_streamed_answer_and_reads_the_usage_chunk():
    turn = Turn.say("Hello from the scripted model!", chunk_size=3, usage=Usage(9, 8), double_done=True)
    async with ModelGateway([turn], api_key=KEY) as gw:
        client = sdk(gw)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        await client.close()

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the scripted model!"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 10
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 17


async def test_openai_sdk_assembles_parallel_streamed_tool_calls():
    calls = (ToolCall("getTime", {"tz": "UTC"}), ToolCall("webSearch", {"q": "popagent", "limit": 3}))
    async with ModelGateway([Turn.call(*calls, chunk_size=4)], api_key=KEY) as gw:
        client = sdk(gw)
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assembled: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in stream:
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = assembled.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += (delta.function and delta.function.name) or ""
                call["arguments"] += (delta.function and delta.function.arguments) or ""
        await client.close()

    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in assembled.values()] == [
        ("getTime", {"tz": "UTC"}),
        ("webSearch", {"q": "popagent", "limit": 3}),
    ]
    assert len({c["id"] for c in assembled.values()}) == 2


async def test_openai_sdk_non_streaming_completion():
    async with ModelGateway([Turn.say("plain answer", usage=Usage(4, 2))], api_key=KEY) as gw:
        client = sdk(gw)
        completion = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=False
        )
        await client.close()

    assert completion.choices[0].message.content == "plain answer"
    assert completion.usage is not None and completion.usage.prompt_tokens == 4
    assert gw.requests[0]["stream"] is False


@pytest.mark.parametrize(
    ("turn", "error_type", "status"),
    [
        (Turn.fail(429, "slow down", retry_after=30), openai.RateLimitError, 429),
        (Turn.fail(500, "upstream exploded"), openai.InternalServerError, 500),
    ],
)
async def test_openai_sdk_surfaces_scripted_http_errors(turn, error_type, status):
    async with ModelGateway([turn], api_key=KEY) as gw:
        client = sdk(gw)
        with pytest.raises(error_type) as caught:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=False
            )
        await client.close()

    assert caught.value.status_code == status
    assert turn.error_message in caught.value.message


async def test_openai_sdk_retries_a_429_after_retry_after_and_gets_the_next_turn():
    async with ModelGateway([Turn.fail(429, retry_after=0), Turn.say("second time lucky")], api_key=KEY) as gw:
        client = sdk(gw, max_retries=1)
        completion = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=False
        )
        await client.close()

    assert completion.choices[0].message.content == "second time lucky"
    assert len(gw.requests) == 2


async def test_openai_sdk_sees_a_broken_stream_as_an_error():
    turn = Turn.say("this stream will not finish", chunk_size=4, break_after_chunks=3)
    received = []
    async with ModelGateway([turn], api_key=KEY) as gw:
        client = sdk(gw)
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content)
        await client.close()

    assert received == ["this", " str", "eam "]


# -- pydantic-ai ---------------------------------------------------------------------


async def test_pydantic_ai_agent_calls_a_tool_then_answers_without_streaming():
    script = [Turn.call(ToolCall("getTime", {"tz": "UTC"}, id="call_t1")), Turn.say("It is noon in UTC.")]
    async with ModelGateway(script, api_key=KEY) as gw:
        result = await agent_for(gw).run("What time is it?")

    assert result.output == "It is noon in UTC."
    first, second = gw.requests
    assert first["stream"] is False and second["stream"] is False
    assert first["model"] == MODEL
    assert [t["function"]["name"] for t in first["tools"]] == ["getTime"]
    tool_message = second["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "call_t1", "content": "12:00 in UTC"}
    assert second["messages"][-2]["tool_calls"][0]["function"] == {"name": "getTime", "arguments": '{"tz":"UTC"}'}
    assert result.usage.requests == 2


async def test_pydantic_ai_agent_streams_a_tool_call_then_the_answer_with_usage():
    script = [
        Turn.call(ToolCall("getTime", {"tz": "Asia/Tokyo"}), chunk_size=3, usage=Usage(30, 10)),
        Turn.say("It is noon in Tokyo.", chunk_size=2, usage=Usage(50, 6), double_done=True),
    ]
    async with ModelGateway(script, api_key=KEY) as gw:
        async with agent_for(gw).run_stream("What time is it in Tokyo?") as result:
            deltas = [delta async for delta in result.stream_text(delta=True)]
            output = await result.get_output()
        usage = result.usage

    assert output == "It is noon in Tokyo."
    assert "".join(deltas) == output
    assert all(r["stream"] is True and r["stream_options"] == {"include_usage": True} for r in gw.requests)
    assert gw.requests[1]["messages"][-1]["content"] == "12:00 in Asia/Tokyo"
    assert (usage.input_tokens, usage.output_tokens) == (80, 16)


async def test_pydantic_ai_runs_parallel_tool_calls_and_returns_every_result():
    calls = (ToolCall("getTime", {"tz": "UTC"}, id="c1"), ToolCall("getTime", {"tz": "Europe/Oslo"}, id="c2"))
    async with ModelGateway([Turn.call(*calls), Turn.say("Both checked.")], api_key=KEY) as gw:
        result = await agent_for(gw).run("Times?")

    assert result.output == "Both checked."
    tool_messages = [m for m in gw.requests[1]["messages"] if m["role"] == "tool"]
    assert sorted((m["tool_call_id"], m["content"]) for m in tool_messages) == [
        ("c1", "12:00 in UTC"),
        ("c2", "12:00 in Europe/Oslo"),
    ]
    response = result.all_messages()[1]
    assert isinstance(response, ModelResponse)
    assert [p.tool_call_id for p in response.parts if isinstance(p, ToolCallPart)] == ["c1", "c2"]


async def test_pydantic_ai_supervisor_delegates_to_a_specialist_against_one_callable_script():
    def responder(body: dict) -> Turn:
        # Decide like a model would: use the tool this agent was offered, then answer from its result.
        last = body["messages"][-1]
        tool = body["tools"][0]["function"]["name"]
        if last["role"] == "user":
            return Turn.call(ToolCall(tool, {"question": last["content"]}))
        return Turn.say(f"{tool} says {last['content']}")

    async with ModelGateway(responder, api_key=KEY) as gw:
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=sdk(gw)))
        specialist = Agent(model, name="specialist")
        supervisor = Agent(model, name="supervisor")

        @specialist.tool_plain
        def lookup(question: str) -> str:
            """Look the answer up."""
            return "Paris"

        @supervisor.tool
        async def delegate(ctx: RunContext[object], question: str) -> str:
            """Delegate a question to the specialist."""
            return (await specialist.run(question, usage=ctx.usage)).output

        result = await supervisor.run("What is the capital of France?")

    assert result.output == "delegate says lookup says Paris"
    # supervisor asks, specialist asks, specialist answers, supervisor answers
    assert [r["tools"][0]["function"]["name"] for r in gw.requests] == ["delegate", "lookup", "lookup", "delegate"]
    assert result.usage.requests == 4


@pytest.mark.parametrize(("turn", "status"), [(Turn.fail(429, retry_after=1), 429), (Turn.fail(500), 500)])
async def test_pydantic_ai_surfaces_http_errors_as_model_http_error(turn, status):
    async with ModelGateway([turn], api_key=KEY) as gw:
        with pytest.raises(ModelHTTPError) as caught:
            await agent_for(gw).run("hi")

    assert caught.value.status_code == status


async def test_pydantic_ai_streaming_fails_on_a_broken_stream():
    turn = Turn.say("never finished", chunk_size=2, break_after_chunks=2)
    async with ModelGateway([turn], api_key=KEY) as gw:
        with pytest.raises(Exception) as caught:  # any client error; which one is checked below
            async with agent_for(gw).run_stream("hi") as result:
                await result.get_output()

    assert not isinstance(caught.value, AssertionError)
    assert any(
        isinstance(error, (httpx.RemoteProtocolError, openai.APIConnectionError))
        for error in (caught.value, caught.value.__cause__, caught.value.__context__)
    ), repr(caught.value)
