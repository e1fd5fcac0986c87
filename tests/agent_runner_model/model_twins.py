"""Run pydantic-ai's `OpenAIChatModel` and our `LeanOpenAIModel` through the same script, one fresh gateway each.

A fresh gateway per model keeps the scripted ids (`chatcmpl-N`, `call_N`) the same for both, so the
recorded request bodies and the assembled messages can be compared whole. Only what differs between
two runs by nature is dropped before comparing: timestamps, the run and conversation ids, and the
gateway's URL (each has its own port).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai import Agent
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

from popagent_agent_runner.llm.model import LeanOpenAIModel
from support.model_gateway import ModelGateway, Turn

API_KEY = "sk-twins"
PROVIDER = "ninerouter"
MODEL = "fake/fake-chat"
Kind = Literal["reference", "lean"]
KINDS: tuple[Kind, Kind] = ("reference", "lean")
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "provider_url"})


def reference_model(url: str, name: str = MODEL, *, profile: ModelProfile | None = None) -> OpenAIChatModel:
    provider = OpenAICompatibleProvider(PROVIDER, base_url=url, api_key=API_KEY, profile=profile)
    return OpenAIChatModel(name, provider=provider)


def lean_model(url: str, name: str = MODEL, **options: Any) -> LeanOpenAIModel:
    return LeanOpenAIModel(name, base_url=url, api_key=API_KEY, provider_name=PROVIDER, **options)


@asynccontextmanager
async def model_at(kind: Kind, url: str, name: str = MODEL, **options: Any) -> AsyncIterator[Model]:
    if kind == "reference":
        async with reference_model(url, name, **options) as reference:
            yield reference
    else:
        lean = lean_model(url, name, **options)
        try:
            yield lean
        finally:
            await lean.aclose()


def stable(value: Any) -> Any:
    """`value` without the keys that differ between two runs of the same script."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def dump(messages: Sequence[ModelMessage]) -> list[Any]:
    return stable(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


@dataclass
class AgentRun:
    url: str
    requests: list[dict[str, Any]]
    messages: list[ModelMessage]
    output: Any
    events: list[AgentStreamEvent] = field(default_factory=list[AgentStreamEvent])


async def run_agent(
    kind: Kind,
    script: Sequence[Turn],
    build: Callable[[Model], Agent[Any, Any]],
    prompt: str | None,
    *,
    stream: bool,
    **run_options: Any,
) -> AgentRun:
    """One agent run of `kind`'s model against a fresh gateway playing `script`."""
    events: list[AgentStreamEvent] = []

    async def collect(_ctx: Any, stream_events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream_events:
            events.append(event)

    async with ModelGateway(list(script), api_key=API_KEY) as gw, model_at(kind, gw.url) as model:
        agent = build(model)
        result = await agent.run(prompt, event_stream_handler=collect if stream else None, **run_options)
        assert gw.pending == 0, "the script was not used up"
        return AgentRun(gw.url, list(gw.requests), result.all_messages(), result.output, events)


async def run_both(
    script: Sequence[Turn],
    build: Callable[[Model], Agent[Any, Any]],
    prompt: str | None,
    *,
    stream: bool,
    **run_options: Any,
) -> tuple[AgentRun, AgentRun]:
    reference = await run_agent("reference", script, build, prompt, stream=stream, **run_options)
    lean = await run_agent("lean", script, build, prompt, stream=stream, **run_options)
    return reference, lean


def assert_agree(reference: AgentRun, lean: AgentRun) -> None:
    """Same request bodies on the wire, same assembled history, same output."""
    assert len(lean.requests) == len(reference.requests)
    for number, (ours, theirs) in enumerate(zip(lean.requests, reference.requests, strict=True)):
        assert ours == theirs, f"request {number} differs"
    assert dump(lean.messages) == dump(reference.messages)
    assert lean.output == reference.output
