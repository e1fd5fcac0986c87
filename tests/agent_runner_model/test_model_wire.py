"""The pure parts of the lean model: SSE framing, the `qwen3.5-4b` merge, profiles, usage, reasoning effort,
and the request shapes for the single-system-message route."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from model_twins import API_KEY, KINDS, model_at, reference_model
from openai.types.chat import ChatCompletionChunk
from pydantic_ai import Agent
from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.openai._reasoning import resolve_openai_thinking_effort
from pydantic_ai.models.openai._response_fields import map_usage as reference_map_usage
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

from popagent_agent_runner.llm.model import LeanOpenAIModel
from popagent_agent_runner.llm.profile import compatible_model_profile
from popagent_agent_runner.llm.request import merge_leading_string_system_messages, resolve_reasoning_effort
from popagent_agent_runner.llm.response import map_usage
from popagent_agent_runner.llm.wire import SSEDecoder
from support.model_gateway import ModelGateway, Turn

# -- SSE framing ---------------------------------------------------------------------------------------------------

STREAM = (
    b": keep-alive comment\n"
    b'data: {"a": 1}\n\n'
    b"event: message\nid: 7\nretry: 100\n"
    b'data: {"b":\ndata: 2}\n\n'
    b'data:{"c": 3}\n\n'
    b"data: [DONE]\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b":\n2}', b'{"c": 3}', b"[DONE]", b"[DONE]"]


def decode(reads: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    events = [event for read in reads for event in decoder.feed(read)]
    return events + list(decoder.close())


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_sse_events_survive_any_split_into_reads(newline: bytes) -> None:
    data = STREAM.replace(b"\n", newline)
    assert decode([data]) == EXPECTED
    for size in (1, 2, 3, 5, 11):
        assert decode([data[i : i + size] for i in range(0, len(data), size)]) == EXPECTED, size


def test_sse_event_without_its_blank_line_is_delivered_at_the_end() -> None:
    assert decode([b'data: {"a": 1}\n\ndata: {"tail": true}']) == [b'{"a": 1}', b'{"tail": true}']
    assert decode([b"data: x\r"]) == [b"x"]
    assert decode([b": only a comment\n\n"]) == []


# -- the qwen3.5-4b route ----------------------------------------------------------------------------------------


def test_merge_leading_string_system_messages() -> None:
    merged = merge_leading_string_system_messages(
        [
            {"role": "system", "content": "A"},
            {"role": "system", "content": "B", "name": "ops"},
            {"role": "system", "content": "C"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "later"},
        ]
    )
    assert merged == [
        {"role": "system", "content": "A\n\nB\n\nC"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "later"},
    ]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "only one"}, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "system", "content": "A"}, {"role": "system", "content": "B"}],
        [{"role": "system", "content": [{"type": "text", "text": "A"}]}, {"role": "system", "content": "B"}],
        [{"role": "system", "content": None}, {"role": "system", "content": "B"}],
        ["not a message", {"role": "system", "content": "B"}],
        [],
    ],
    ids=["single", "not-leading", "list-content-first", "null-content", "malformed", "empty"],
)
def test_non_mergeable_messages_pass_unchanged(messages: list[Any]) -> None:
    assert merge_leading_string_system_messages(messages) is messages
    assert merge_leading_string_system_messages("not a list") == "not a list"  # type: ignore[arg-type]


def test_a_non_string_system_message_ends_the_run() -> None:
    parts = {"role": "system", "content": [{"type": "text", "text": "C"}]}
    messages = [{"role": "system", "content": "A"}, {"role": "system", "content": "B"}, parts]
    assert merge_leading_string_system_messages(messages) == [{"role": "system", "content": "A\n\nB"}, parts]


def single_system_agent(model: Any) -> Agent[None, str]:
    return Agent(model, system_prompt=["You are popagent.", "The user is in Lisbon."], instructions="Be brief.")


@pytest.mark.parametrize("name", ["qwen3.5-4b", "llamacpp/qwen3.5-4b"])
async def test_the_qwen_route_gets_one_leading_system_message(name: str) -> None:
    script = [Turn.say("Olá."), Turn.say("Olá.")]
    async with ModelGateway(script, api_key=API_KEY) as gw:
        async with model_at("lean", gw.url, name) as model:
            await single_system_agent(model).run("Hi")
        # `OpenAIChatModel` does the same merge for a profile that says so.
        reference = reference_model(
            gw.url, name, profile=OpenAIModelProfile(openai_chat_supports_multiple_system_messages=False)
        )
        async with reference:
            await single_system_agent(reference).run("Hi")
    ours, theirs = gw.requests
    assert ours["model"] == name
    assert ours["messages"] == [
        {"role": "system", "content": "You are popagent.\n\nThe user is in Lisbon.\n\nBe brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert ours == theirs


@pytest.mark.parametrize("name", ["fake/fake-chat", "qwen3.5-4b-instruct", "qwen/qwen3.5-7b"])
async def test_other_models_keep_their_system_messages(name: str) -> None:
    async with ModelGateway([Turn.say("Hi.")] * 2, api_key=API_KEY) as gw:
        for kind in KINDS:
            async with model_at(kind, gw.url, name) as model:
                await single_system_agent(model).run("Hi")
    ours, theirs = gw.requests[1], gw.requests[0]
    assert [m["role"] for m in ours["messages"]] == ["system", "system", "system", "user"]
    assert ours == theirs


# -- profiles, usage, reasoning effort: the same rules as pydantic-ai's openai package -----------------------------

NAMES = [
    "fake/fake-chat",
    "qwen3.5-4b",
    "cx/gpt-5.2-codex",
    "openai/gpt-5.2",
    "openai/gpt-oss-120b",
    "anthropic/claude-sonnet-4.5",
    "deepseek/deepseek-reasoner",
    "mistral/mistral-large",
    "mistralai/magistral-medium",
    "groq/llama-3.3-70b",
    "bedrock/amazon.nova-pro",
    "google/gemini-2.5-pro",
    "qwen/qwen3-coder",
    "x-ai/grok-4",
    "meta-llama/llama-4",
    "gpt-4o",
]


@pytest.mark.parametrize("name", NAMES)
def test_profile_matches_the_openai_compatible_provider(name: str) -> None:
    assert compatible_model_profile(name) == OpenAICompatibleProvider.model_profile(name)
    provider = OpenAICompatibleProvider("ninerouter", base_url="http://127.0.0.1:9/v1", api_key="k")
    reference = OpenAIChatModel(name, provider=provider)
    lean = LeanOpenAIModel(name, base_url="http://127.0.0.1:9/v1", api_key="k")
    assert lean.profile == reference.profile
    assert (lean.system, lean.model_id) == (reference.system, reference.model_id)


def test_a_profile_override_applies_like_a_providers() -> None:
    override = ModelProfile(supports_tools=False)
    provider = OpenAICompatibleProvider("ninerouter", base_url="http://127.0.0.1:9/v1", profile=override)
    reference = OpenAIChatModel("fake/fake-chat", provider=provider)
    lean = LeanOpenAIModel("fake/fake-chat", base_url="http://127.0.0.1:9/v1", profile=override)
    assert lean.profile == reference.profile
    assert lean.profile.get("supports_tools") is False


USAGES: list[dict[str, Any]] = [
    {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "total_tokens": 140,
        "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": None, "accepted_prediction_tokens": 0},
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": None, "cache_write_tokens": 8},
        "estimated": True,
        "cost": None,
    },
]


@pytest.mark.parametrize("usage", USAGES)
@pytest.mark.parametrize("provider", ["ninerouter", "openai", "deepseek"])
def test_usage_maps_like_the_reference(usage: dict[str, Any], provider: str) -> None:
    chunk = ChatCompletionChunk.model_validate(
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": usage}
    )
    expected = reference_map_usage(chunk, provider, "http://127.0.0.1:9/v1/", "deepseek-chat")
    assert map_usage(usage, provider, "http://127.0.0.1:9/v1/", "deepseek-chat") == expected


PROFILES: list[dict[str, Any]] = [
    {},
    {"thinking_always_enabled": True},
    {"openai_supports_minimal_reasoning_effort": False},
    {"openai_reasoning_efforts": frozenset({"low", "medium", "high"})},
    {"openai_reasoning_efforts": frozenset({"none", "low", "high", "max"})},
    {"openai_reasoning_efforts": frozenset({"none"})},
]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("supports_max", [True, False])
def test_reasoning_effort_resolves_like_the_reference(profile: dict[str, Any], supports_max: bool) -> None:
    for thinking in (True, False, "minimal", "low", "medium", "high", "xhigh", "max"):
        expected = resolve_openai_thinking_effort(thinking, profile, supports_max=supports_max)  # type: ignore[arg-type]
        assert resolve_reasoning_effort(thinking, profile, supports_max=supports_max) == expected, thinking  # type: ignore[arg-type]


async def test_thinking_on_a_reasoning_model_maps_like_the_reference() -> None:
    settings: Any = {"thinking": "high", "temperature": 0.3, "max_tokens": 99}
    messages = [ModelRequest(parts=[UserPromptPart("Think.")])]
    async with ModelGateway([Turn.say("Done.")] * 2, api_key=API_KEY) as gw:
        for kind in KINDS:
            async with model_at(kind, gw.url, "openai/gpt-5.2") as model:
                # Both drop sampling parameters a reasoning request rejects, and say so.
                with pytest.warns(UserWarning, match="Sampling parameters"):
                    await model_request(model, messages, model_settings=settings)
    reference_body, lean_body = gw.requests
    assert lean_body == reference_body
    assert lean_body["reasoning_effort"] == "high" and "temperature" not in lean_body


async def test_settings_it_cannot_honour_are_refused() -> None:
    async with ModelGateway([Turn.say("unused")], api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        with pytest.raises(UserError, match="openai_continuous_usage_stats"):
            await model_request(
                model,
                [ModelRequest(parts=[UserPromptPart("Hi")])],
                model_settings={"openai_continuous_usage_stats": True},  # type: ignore[typeddict-unknown-key]
            )
        assert gw.requests == []


def test_importing_the_model_does_not_import_the_openai_sdk() -> None:
    import subprocess
    import sys

    probe = "import sys, popagent_agent_runner.llm.model; print('openai' in sys.modules, 'httpx2' in sys.modules)"
    with warnings.catch_warnings():
        output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert output.split()[0] == "False"
