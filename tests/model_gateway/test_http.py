"""The scripted model server's wire format, read with plain httpx."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from support.model_gateway import ModelGateway, ModelInfo, ToolCall, Turn, Usage, tool_call_then_answer
from support.waiting import eventually

KEY = "sk-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def chat(stream: bool | None = True, **extra: object) -> dict:
    body: dict = {"model": "fake/fake-chat", "messages": [{"role": "user", "content": "hi"}], **extra}
    if stream is not None:
        body["stream"] = stream
    return body


def sse_payloads(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order (JSON chunks and [DONE] markers)."""
    return [line.removeprefix("data: ") for line in text.split("\n\n") if line.startswith("data: ")]


def json_chunks(text: str) -> list[dict]:
    return [json.loads(p) for p in sse_payloads(text) if p != "[DONE]"]


async def test_models_are_listed_without_a_key_with_context_window_fields():
    models = [ModelInfo("fake/fake-chat", 32_000, 4_000), ModelInfo("other/big", 1_000_000, 64_000)]
    async with ModelGateway(api_key=KEY, models=models) as gw, httpx.AsyncClient() as client:
        response = await client.get(f"{gw.url}/models")

    assert response.status_code == 200
    listing = response.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["fake/fake-chat", "other/big"]
    first = listing["data"][0]
    assert first["object"] == "model" and first["owned_by"] == "fake"
    assert first["context_length"] == first["capabilities"]["contextWindow"] == 32_000
    assert first["max_completion_tokens"] == first["capabilities"]["maxOutput"] == 4_000


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}])
async def test_chat_without_the_right_bearer_key_is_401_and_consumes_nothing(headers):
    async with ModelGateway([Turn.say("hello")], api_key=KEY) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(), headers=headers)

        assert response.status_code == 401
        assert "API key" in response.json()["error"]["message"]
        assert gw.unauthorized == 1
        assert gw.requests == []
        assert gw.pending == 1


async def test_a_streamed_text_turn_is_split_into_chunks_of_the_configured_size():
    turn = Turn.say("The quick brown fox", chunk_size=5)
    async with ModelGateway([turn], api_key=KEY) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(), headers=AUTH)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    chunks = json_chunks(response.text)
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "fake/fake-chat" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert [d.get("content") for d in deltas] == ["The q", "uick ", "brown", " fox", None]
    assert deltas[0]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, None, "stop"]
    # No usage chunk unless asked for; exactly one [DONE] unless scripted otherwise.
    assert not any("usage" in c for c in chunks)
    assert sse_payloads(response.text)[-1] == "[DONE]"
    assert sse_payloads(response.text).count("[DONE]") == 1


async def test_usage_comes_in_its_own_chunk_when_include_usage_is_set_and_done_can_come_twice():
    turn = Turn.say("hi there", usage=Usage(11, 3), double_done=True)
    async with ModelGateway([turn]) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(stream_options={"include_usage": True}))

    payloads = sse_payloads(response.text)
    assert payloads[-2:] == ["[DONE]", "[DONE]"]
    usage_chunk = json.loads(payloads[-3])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


async def test_the_finish_chunk_can_carry_an_estimated_usage_before_the_real_one():
    turn = Turn.say("hi", usage=Usage(20, 5), estimated_usage_in_finish=True)
    async with ModelGateway([turn]) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(stream_options={"include_usage": True}))

    finish, real = json_chunks(response.text)[-2:]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["usage"] != real["usage"]
    assert real["usage"]["prompt_tokens"] == 20 and real["usage"]["completion_tokens"] == 5


async def test_like_9router_a_non_streamed_answer_overstates_prompt_tokens_by_2000():
    turn = Turn.say("hi", usage=Usage(40, 5))
    async with ModelGateway([turn, turn], ninerouter_usage=True) as gw, httpx.AsyncClient() as client:
        plain = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))
        gw.ninerouter_usage = False
        upstream = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))

    assert plain.json()["usage"] == {"prompt_tokens": 2040, "completion_tokens": 5, "total_tokens": 2045}
    assert upstream.json()["usage"] == {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}


async def test_like_9router_a_stream_marks_its_finish_chunk_usage_estimated_then_sends_the_real_one():
    turns = [Turn.say("hi", usage=Usage(40, 5)), Turn.say("hi", usage=Usage(40, 5), usage_chunk=False)]
    async with ModelGateway(turns, ninerouter_usage=True) as gw, httpx.AsyncClient() as client:
        both = await client.post(f"{gw.url}/chat/completions", json=chat(stream_options={"include_usage": True}))
        estimate_only = await client.post(
            f"{gw.url}/chat/completions", json=chat(stream_options={"include_usage": True})
        )

    finish, real = json_chunks(both.text)[-2:]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["usage"]["estimated"] is True and finish["usage"]["prompt_tokens"] != 40
    assert real["choices"] == [] and real["usage"] == {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
    last = json_chunks(estimate_only.text)[-1]
    assert last["choices"][0]["finish_reason"] == "stop" and last["usage"]["estimated"] is True


async def test_parallel_tool_calls_stream_ids_names_and_arguments_split_over_several_chunks():
    calls = (ToolCall("getTime", {"tz": "Europe/Paris"}, id="call_a"), ToolCall("webSearch", {"q": "nats jetstream"}))
    async with ModelGateway([Turn.call(*calls, chunk_size=6)]) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat())

    chunks = json_chunks(response.text)
    tool_deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    headers = [d for d in tool_deltas if "id" in d]
    assert [(h["index"], h["function"]["name"]) for h in headers] == [(0, "getTime"), (1, "webSearch")]
    assert headers[0]["id"] == "call_a"
    assert headers[1]["id"].startswith("call_") and headers[1]["id"] != "call_a"
    for index, call in enumerate(calls):
        pieces = [d["function"]["arguments"] for d in tool_deltas if d["index"] == index]
        assert len([p for p in pieces if p]) >= 3
        assert json.loads("".join(pieces)) == call.arguments
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_request_without_stream_is_answered_as_a_stream_like_9router():
    async with ModelGateway([Turn.say("streamed")]) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(stream=None))

    assert response.headers["content-type"] == "text/event-stream"
    assert sse_payloads(response.text)[-1] == "[DONE]"


async def test_a_non_streaming_request_gets_one_completion_with_usage():
    turn = Turn.call(ToolCall("getTime", '{"tz":"UTC"}', id="call_x"), text="Let me check.")
    async with ModelGateway([turn]) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))

    completion = response.json()
    assert completion["object"] == "chat.completion"
    [choice] = completion["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check."
    assert choice["message"]["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "getTime", "arguments": '{"tz":"UTC"}'}}
    ]
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


async def test_every_request_body_is_recorded_in_order():
    async with ModelGateway([Turn.say("a"), Turn.say("b")]) as gw, httpx.AsyncClient() as client:
        first = chat(stream=False, tools=[{"type": "function", "function": {"name": "getTime", "parameters": {}}}])
        second = chat(stream=True, temperature=0.2)
        await client.post(f"{gw.url}/chat/completions", json=first)
        await client.post(f"{gw.url}/chat/completions", json=second)

        assert gw.requests == [first, second]
        assert gw.pending == 0


async def test_an_exhausted_script_answers_400_saying_so_and_push_adds_turns():
    async with ModelGateway() as gw, httpx.AsyncClient() as client:
        exhausted = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))
        gw.push(Turn.say("now there is one"))
        answered = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))

    assert exhausted.status_code == 400
    assert "no scripted turn left" in exhausted.json()["error"]["message"]
    assert answered.json()["choices"][0]["message"]["content"] == "now there is one"


async def test_reset_forgets_queued_turns_the_responder_and_the_records_but_keeps_the_models():
    models = [ModelInfo("only/one")]
    gateway = ModelGateway([Turn.say("used"), Turn.say("left over")], api_key=KEY, models=models)
    async with gateway as gw, httpx.AsyncClient() as client:
        await client.post(f"{gw.url}/chat/completions", json=chat(stream=False), headers=AUTH)
        await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))
        gw.responder = lambda body: Turn.say("from the responder")
        assert (gw.pending, len(gw.requests), gw.unauthorized) == (1, 1, 1)

        gw.reset()

        assert (gw.pending, gw.requests, gw.unauthorized, gw.disconnected) == (0, [], 0, 0)
        assert gw.responder is None
        exhausted = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False), headers=AUTH)
        listed = await client.get(f"{gw.url}/models")

    assert exhausted.status_code == 400
    assert "no scripted turn left" in exhausted.json()["error"]["message"]
    assert [model["id"] for model in listed.json()["data"]] == ["only/one"]
    # Only the request after the reset is recorded.
    assert len(gw.requests) == 1


async def test_429_carries_retry_after_and_500_is_a_server_error():
    script = [Turn.fail(429, "slow down", retry_after=7), Turn.fail(500)]
    async with ModelGateway(script) as gw, httpx.AsyncClient() as client:
        limited = await client.post(f"{gw.url}/chat/completions", json=chat())
        broken = await client.post(f"{gw.url}/chat/completions", json=chat())

    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.json()["error"] == {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}
    assert broken.status_code == 500
    assert "retry-after" not in broken.headers


async def test_first_byte_latency_and_chunk_delay_are_applied():
    turn = Turn.say("abcdef", chunk_size=2, first_byte_delay_s=0.3, chunk_delay_s=0.1)
    async with ModelGateway([turn]) as gw, httpx.AsyncClient() as client:
        started = time.monotonic()
        arrivals = []
        async with client.stream("POST", f"{gw.url}/chat/completions", json=chat()) as response:
            headers_at = time.monotonic() - started
            async for line in response.aiter_lines():
                if '"content"' in line:
                    arrivals.append(time.monotonic() - started)

    assert headers_at >= 0.3
    assert len(arrivals) == 3
    assert arrivals[2] - arrivals[0] >= 0.2 - 0.02


async def test_a_broken_stream_closes_the_connection_after_the_scripted_chunks_without_done():
    turn = Turn.say("one two three four", chunk_size=4, break_after_chunks=2)
    received: list[str] = []
    async with ModelGateway([turn]) as gw, httpx.AsyncClient() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", f"{gw.url}/chat/completions", json=chat()) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        received.append(line.removeprefix("data: "))

        # The server survives and answers the next request.
        gw.push(Turn.say("fine", chunk_size=100))
        after = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))

    assert [json.loads(p)["choices"][0]["delta"]["content"] for p in received] == ["one ", "two "]
    assert after.json()["choices"][0]["message"]["content"] == "fine"


async def test_a_callable_script_decides_from_the_request():
    responder = tool_call_then_answer(ToolCall("delegate", {"agent": "researcher"}), "All done.")
    async with ModelGateway(responder) as gw, httpx.AsyncClient() as client:
        first = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))
        tool_reply = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
        second = await client.post(
            f"{gw.url}/chat/completions",
            json=chat(stream=False, messages=[{"role": "user", "content": "hi"}, tool_reply]),
        )

    assert first.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "delegate"
    assert second.json()["choices"][0]["message"]["content"] == "All done."


async def test_an_async_callable_script_can_wait_and_read_the_body():
    async def echo(body: dict) -> Turn:
        await asyncio.sleep(0.01)
        return Turn.say(f"you said {body['messages'][-1]['content']}")

    async with ModelGateway(echo) as gw, httpx.AsyncClient() as client:
        response = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))

    assert response.json()["choices"][0]["message"]["content"] == "you said hi"


async def test_loop_mode_repeats_the_script():
    async with ModelGateway([Turn.say("a"), Turn.say("b")], loop=True) as gw, httpx.AsyncClient() as client:
        contents = []
        for _ in range(5):
            response = await client.post(f"{gw.url}/chat/completions", json=chat(stream=False))
            contents.append(response.json()["choices"][0]["message"]["content"])

    assert contents == ["a", "b", "a", "b", "a"]


async def test_a_client_that_walks_away_mid_stream_is_counted_and_the_stream_stops():
    # Ten seconds of stream if nobody stops it.
    turn = Turn.say("x" * 1000, chunk_size=1, chunk_delay_s=0.01)
    async with ModelGateway([turn]) as gw:
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", f"{gw.url}/chat/completions", json=chat()) as response,
        ):
            async for line in response.aiter_lines():
                if '"content"' in line:
                    break

        # The counter moves only when the streaming loop notices and returns.
        await eventually(lambda: gw.disconnected, within=5, interval=0.02, what="the streaming loop to notice")

        assert gw.disconnected == 1


async def test_unknown_routes_are_404_and_bad_json_is_400():
    async with ModelGateway([Turn.say("x")]) as gw, httpx.AsyncClient() as client:
        missing = await client.get(f"{gw.url}/audio/speech")
        bad = await client.post(f"{gw.url}/chat/completions", content=b"{not json")

        assert gw.pending == 1
    assert missing.status_code == 404
    assert bad.status_code == 400


def test_turns_load_from_the_json_script_format():
    turn = Turn.from_dict(
        {
            "text": "hi",
            "tool_calls": [{"name": "getTime", "arguments": {"tz": "UTC"}, "id": "c1"}],
            "chunk_size": 3,
            "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        }
    )
    failure = Turn.from_dict({"error": {"status": 429, "retry_after": 2, "message": "busy"}})

    assert turn == Turn.call(ToolCall("getTime", {"tz": "UTC"}, id="c1"), text="hi", chunk_size=3, usage=Usage(1, 2))
    assert failure == Turn.fail(429, "busy", retry_after=2)
    with pytest.raises(ValueError, match="chunksize"):
        Turn.from_dict({"text": "x", "chunksize": 3})
