"""Response decoding: a complete Chat Completions answer, and the pieces of one a stream shares, as pydantic-ai types.

The mappings mirror `OpenAIChatModel` (pydantic-ai 2.68, `models/openai/`) on plain dicts, because
that module imports the openai SDK and builds a pydantic object per chunk; the agreement tests in
`tests/agent_runner_model/` hold the two together.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Final, cast

from pydantic_ai import UnexpectedModelBehavior
from pydantic_ai.messages import FinishReason, ModelResponse, ModelResponsePart, ThinkingPart, ToolCallPart
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.usage import RequestUsage, RunUsage

from popagent_agent_runner.llm.pydantic_ai_internals import (
    guard_tool_call_id,
    now_utc,
    number_to_datetime,
    split_content_into_text_and_thinking,
)

__all__ = [
    "CHAT_FINISH_REASON_MAP",
    "ESTIMATED",
    "decode_completion",
    "is_estimated",
    "map_logprobs",
    "map_usage",
    "split_content_parts",
]

ESTIMATED: Final = "estimated"
"""The usage detail 9Router's estimate carries (`"estimated": true`), kept by `map_usage` as `OpenAIChatModel` keeps it."""

CHAT_FINISH_REASON_MAP: Final[dict[str, FinishReason]] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "content_filter": "content_filter",
    "function_call": "tool_call",
}
"""Chat Completions finish reasons, as `OpenAIChatModel` maps them; any other value maps to `None`."""


def split_content_parts(content: object) -> object:
    """The text of a `content` sent as a list of parts (some OpenAI-compatible servers do), as `OpenAIChatModel` joins it."""
    if not isinstance(content, list):
        return content
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text" and isinstance(text := part.get("text"), str):
            texts.append(text)
    return "".join(texts) or None


def _without_none(value: Any) -> Any:
    # What `model_dump(exclude_none=True)` does to the SDK's usage object, on the wire dict.
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def map_usage(usage: Mapping[str, Any], provider: str, provider_url: str, model: str) -> RequestUsage:
    """A Chat Completions `usage` object as `RequestUsage`, the way `OpenAIChatModel` maps it."""
    usage_data = _without_none(dict(usage))
    details: dict[str, Any] = {
        k: v
        for k, v in usage_data.items()
        if k not in {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"}
        and isinstance(v, int)  # bools too, as `OpenAIChatModel` keeps them (9Router's `"estimated": true`)
    }
    completion_details = usage_data.get("completion_tokens_details")
    if isinstance(completion_details, dict):
        details.update(completion_details)
    request_usage = RequestUsage.extract(
        {"model": model, "usage": usage_data},
        provider=provider,
        provider_url=provider_url,
        provider_fallback="openai",
        api_flavor="chat",
        details=details,
    )
    prompt_details = usage_data.get("prompt_tokens_details")
    if isinstance(prompt_details, dict) and isinstance(cache_write := prompt_details.get("cache_write_tokens"), int):
        request_usage.cache_write_tokens = cache_write
    return request_usage


def map_logprobs(content: list[Any]) -> list[dict[str, Any]]:
    """`choice.logprobs.content` as `OpenAIChatModel` keeps it in `provider_details['logprobs']`."""
    return [
        {
            "token": lp.get("token"),
            "bytes": lp.get("bytes"),
            "logprob": lp.get("logprob"),
            "top_logprobs": [
                {"token": t.get("token"), "bytes": t.get("bytes"), "logprob": t.get("logprob")}
                for t in lp.get("top_logprobs") or []
            ],
        }
        for lp in content
        if isinstance(lp, dict)
    ]


def is_estimated(usage: RunUsage | RequestUsage) -> bool:
    """Whether any request counted in `usage` reported only an estimate (its stream sent no real usage after it)."""
    return usage.details.get(ESTIMATED, 0) > 0


def decode_completion(
    data: Any,
    *,
    profile: OpenAIModelProfile,
    model_name: str,
    provider_name: str,
    provider_url: str,
    canonical_system: str | None,
) -> ModelResponse:
    """A complete (non-streamed) `chat.completion` body as the `ModelResponse` `OpenAIChatModel` makes of it."""
    if not isinstance(data, dict):
        raise UnexpectedModelBehavior(
            f"Invalid response from {provider_name} chat completions endpoint, expected JSON data"
        )
    data = cast(dict[str, Any], data)
    timestamp = now_utc()
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnexpectedModelBehavior(f"Invalid response from {provider_name} chat completions endpoint: no choices")
    choice = cast(dict[str, Any], choices[0])
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UnexpectedModelBehavior(f"Invalid response from {provider_name} chat completions endpoint: no message")
    message = cast(dict[str, Any], message)
    raw_finish_reason = choice.get("finish_reason")
    finish_reason = CHAT_FINISH_REASON_MAP.get(raw_finish_reason) if raw_finish_reason else "stop"

    provider_details: dict[str, Any] = {}
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(content := logprobs.get("content"), list) and content:
        provider_details["logprobs"] = map_logprobs(content)
    if raw_finish_reason:
        provider_details["finish_reason"] = raw_finish_reason
    if moderation := data.get("moderation"):
        provider_details["moderation"] = moderation
    if service_tier := data.get("service_tier"):
        provider_details["service_tier"] = service_tier
    usage = data.get("usage")
    request_usage = (
        map_usage(usage, provider_name, provider_url, model_name)
        if isinstance(usage, dict)
        else RequestUsage(unmeasured_requests=1)
    )
    created = data.get("created")
    common: dict[str, Any] = {
        "usage": request_usage,
        "model_name": data.get("model") or model_name,
        "provider_response_id": data.get("id") or None,
        "provider_name": provider_name,
        "provider_url": provider_url,
        "canonical_system": canonical_system,
    }

    if refusal := message.get("refusal"):
        provider_details.pop("finish_reason", None)
        provider_details["refusal"] = refusal
        if created:
            provider_details["timestamp"] = number_to_datetime(created)
        return ModelResponse(
            parts=[],
            timestamp=now_utc(),
            provider_details=provider_details or None,
            finish_reason="content_filter",
            **common,
        )

    parts: list[ModelResponsePart] = []
    for name in (profile.get("openai_chat_thinking_field", None), "reasoning", "reasoning_content"):
        if not name or not (reasoning := message.get(name)):
            continue
        if not isinstance(reasoning, str):
            warnings.warn(
                f"Unexpected non-string value for {name!r}: {type(reasoning).__name__}.", UserWarning, stacklevel=2
            )
            continue
        parts.append(ThinkingPart(id=name, content=reasoning, provider_name=provider_name))
        break
    content = split_content_parts(message.get("content"))
    for text_part in split_content_into_text_and_thinking(
        content if isinstance(content, str) else "", profile.get("thinking_tags", ("<think>", "</think>"))
    ):
        if isinstance(text_part, ThinkingPart):
            text_part.id, text_part.provider_name = "content", provider_name
        parts.append(text_part)
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        extra_content = call.get("extra_content")
        part_details = {"extra_content": extra_content} if extra_content else None
        tool_call = ToolCallPart(
            function.get("name", ""),
            function.get("arguments"),
            tool_call_id=call.get("id"),
            provider_name=provider_name if part_details else None,
            provider_details=part_details,
        )
        tool_call.tool_call_id = guard_tool_call_id(tool_call)
        parts.append(tool_call)
    if created:
        provider_details["timestamp"] = number_to_datetime(created)
    return ModelResponse(
        parts=parts,
        timestamp=timestamp,
        provider_details=provider_details or None,
        finish_reason=finish_reason,
        **common,
    )
