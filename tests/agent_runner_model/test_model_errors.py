"""Provider failures surface as pydantic-ai's error classes, with what `StopFailure` reports."""

from __future__ import annotations

from typing import Any

import pytest
from model_twins import API_KEY, lean_model, model_at
from pydantic_ai import Agent
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelRequest, UserPromptPart

from popagent_agent_runner.llm.model import LeanOpenAIModel, classify_model_error, streaming_to
from popagent_agent_runner.turn.agent_runs import run_agent
from popagent_dev.embedded import free_port
from support.model_gateway import ModelGateway, Turn

MESSAGES = [ModelRequest(parts=[UserPromptPart("Hi")])]


async def call(model: Any, *, stream: bool, **options: Any) -> None:
    settings: Any = options or None
    if stream:
        async with model_request_stream(model, MESSAGES, model_settings=settings) as response:
            async for _ in response:
                pass
    else:
        await model_request(model, MESSAGES, model_settings=settings)


STATUS_CASES = [
    (Turn.fail(429, "slow down", retry_after=7), ModelRateLimitError, "rate_limit", 7.0),
    (Turn.fail(500, "boom"), ModelServerError, "server_error", None),
    (Turn.fail(502, "bad gateway"), ModelServerError, "server_error", None),
    (Turn.fail(503, "try later", retry_after=2), ModelUnavailableError, "unavailable", 2.0),
]


@pytest.mark.parametrize(("turn", "category", "error_class", "retry_after"), STATUS_CASES)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_http_errors_are_classified_like_the_reference(
    turn: Turn, category: type[ModelAPIError], error_class: str, retry_after: float | None, stream: bool
) -> None:
    raised: dict[str, BaseException] = {}
    for kind in ("reference", "lean"):
        async with ModelGateway([turn], api_key=API_KEY) as gw, model_at(kind, gw.url) as model:
            with pytest.raises(category) as error:
                # The SDK behind the reference retries by itself unless told not to.
                await call(model, stream=stream, max_retries=0)
            raised[kind] = error.value
    ours, theirs = raised["lean"], raised["reference"]
    assert isinstance(ours, ModelHTTPError) and isinstance(theirs, ModelHTTPError)
    assert type(ours) is type(theirs)
    assert (ours.status_code, ours.retry_after, ours.body) == (theirs.status_code, theirs.retry_after, theirs.body)
    assert ours.status_code == turn.status
    failure = classify_model_error(ours)
    assert (failure.error_class, failure.status_code, failure.retry_after) == (error_class, turn.status, retry_after)
    assert turn.error_message in failure.message


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_a_wrong_key_is_an_authentication_error(stream: bool) -> None:
    async with ModelGateway([Turn.say("never")], api_key=API_KEY) as gw:
        model = LeanOpenAIModel("fake/fake-chat", base_url=gw.url, api_key="sk-wrong")
        try:
            with pytest.raises(ModelAuthenticationError) as error:
                await call(model, stream=stream)
        finally:
            await model.aclose()
        assert gw.unauthorized == 1 and gw.pending == 1
    assert isinstance(error.value, ModelHTTPError) and error.value.status_code == 401
    assert classify_model_error(error.value).error_class == "authentication"
    assert classify_model_error(error.value).status_code == 401


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "complete"])
async def test_nothing_listening_is_a_connection_error(stream: bool) -> None:
    model = lean_model(f"http://127.0.0.1:{free_port()}/v1")
    try:
        with pytest.raises(ModelConnectionError) as error:
            await call(model, stream=stream)
    finally:
        await model.aclose()
    assert error.value.phase == "connect"
    failure = classify_model_error(error.value)
    assert (failure.error_class, failure.status_code, failure.retry_after) == ("connection", None, None)


async def test_a_stream_broken_before_done_is_a_connection_error_through_an_agent_run() -> None:
    script = [Turn.say("a long answer that never ends " * 10, chunk_size=5, break_after_chunks=6)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        seen: list[Any] = []

        async def handler(_ctx: Any, stream: Any) -> None:
            async for event in stream:
                seen.append(event)

        with pytest.raises(ModelConnectionError) as error:
            await Agent(model).run("Talk.", event_stream_handler=handler)
    assert error.value.phase == "read"
    assert seen, "the first chunks were streamed before the break"
    failure = classify_model_error(error.value)
    assert (failure.error_class, failure.in_stream) == ("connection", True)


async def test_a_stream_broken_inside_a_turns_request_is_a_broken_stream() -> None:
    # A turn's agents answer pydantic-ai unstreamed (`run_agent`); the server stream still broke mid-answer.
    script = [Turn.say("a long answer that never ends " * 10, chunk_size=5, break_after_chunks=6)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        sink = TextSink()
        with pytest.raises(ModelConnectionError) as error, streaming_to(sink):
            await run_agent(Agent(model), "Talk.", tool_events=ignore_events)
    assert error.value.phase == "read"
    assert sink.text, "the first chunks reached the sink before the break"
    failure = classify_model_error(error.value)
    assert (failure.error_class, failure.in_stream) == ("connection", True)


async def test_a_transport_error_while_reading_a_stream_is_in_stream() -> None:
    # The scripted server stops mid-body of a chunked response: the client sees a transport error, not EOF.
    script = [Turn.say("partial answer " * 20, chunk_size=5, break_after_chunks=3)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        with pytest.raises(ModelConnectionError) as error:
            await call(model, stream=True)
    assert error.value.in_stream


class TextSink:
    def __init__(self) -> None:
        self.text: list[str] = []

    def text_delta(self, index: int, delta: str) -> None:
        self.text.append(delta)

    def thinking_delta(self, index: int, delta: str) -> None:
        pass


async def ignore_events(stream: Any) -> None:
    async for _ in stream:
        pass


async def test_a_slow_first_byte_past_the_timeout_is_a_timeout() -> None:
    script = [Turn.say("late", first_byte_delay_s=2.0)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        with pytest.raises(ModelTimeoutError) as error:
            await call(model, stream=True, timeout=0.3)
    assert error.value.phase == "read"
    assert classify_model_error(error.value).error_class == "timeout"


async def test_retries_wait_for_retry_after_and_then_succeed() -> None:
    script = [Turn.fail(429, "slow down", retry_after=0.2), Turn.fail(503, "busy"), Turn.say("finally")]
    async with ModelGateway(script, api_key=API_KEY) as gw:
        model = lean_model(gw.url, max_retries=2)
        try:
            async with model_request_stream(model, MESSAGES) as stream:
                async for _ in stream:
                    pass
                response = stream.get()
            assert len(gw.requests) == 3
            # The setting overrides the model's default: no retry for this one.
            gw.push(Turn.fail(429, "again"), Turn.say("unused"))
            with pytest.raises(ModelRateLimitError):
                await call(model, stream=False, max_retries=0)
        finally:
            await model.aclose()
    assert response.parts[0].content == "finally"  # pyright: ignore[reportAttributeAccessIssue]
    assert gw.pending == 1


async def test_a_client_error_is_not_retried() -> None:
    async with ModelGateway([Turn.fail(400, "bad request"), Turn.say("unused")], api_key=API_KEY) as gw:
        model = lean_model(gw.url, max_retries=3)
        try:
            with pytest.raises(ModelHTTPError) as error:
                await call(model, stream=True)
        finally:
            await model.aclose()
        assert len(gw.requests) == 1
    assert classify_model_error(error.value).error_class == "rejected"


def test_framework_errors_are_named_as_such() -> None:
    failure = classify_model_error(RuntimeError("tool crashed"))
    assert (failure.error_class, failure.status_code, failure.message) == ("framework", None, "tool crashed")
