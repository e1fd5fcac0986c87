"""`LeanOpenAIModel`: a pydantic-ai `Model` for any OpenAI-compatible `/v1/chat/completions` server.

Built on one shared keep-alive `httpx.AsyncClient` and orjson; the openai SDK is never imported. It
sends the request pydantic-ai's `OpenAIChatModel` would send through an `OpenAICompatibleProvider`
of the same name and assembles the same `ModelResponse` (the agreement tests in
`tests/agent_runner_model/` check both against one scripted server), with these differences, each
on purpose:

- Streaming hands text to the turn's `TurnSink` at once and pydantic-ai coalesced deltas (see
  `llm.stream`), which is what makes streaming cheap. With a sink set, `request()` streams too
  (text to the sink, the finished response to pydantic-ai), so a turn's agents run unstreamed.
- Tool schemas go through the profile's JSON-schema transformer once per distinct schema, not on
  every request.
- When a stream reports usage more than once (9Router puts an estimate on the finish chunk before
  the real figures), the last report wins; `OpenAIChatModel` adds them up.
- A stream that ends before `[DONE]` and before any finish reason raises `ModelConnectionError`;
  `OpenAIChatModel` lets the raw transport error through or accepts the truncated answer.
- There are no automatic retries unless asked for (`max_retries`): the turn decides, and reports
  the failure (`classify_model_error`) when it gives up.
- The `qwen3.5-4b` route gets its leading string system messages merged into one (AGENTS_BACKEND.md
  "Model provider"); other models get the messages unchanged.
- Settings only `OpenAIChatModel`'s Responses-era features use (raw annotations, unmapped response
  data, continuous usage stats, cached instructions, prompt cache breakpoints) raise `UserError`.
"""

from __future__ import annotations

import asyncio
import math
import random
import warnings
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import TracebackType
from typing import Any, ClassVar, Self, assert_never, cast

import httpx
import orjson
from pydantic_ai import RunContext, UnexpectedModelBehavior
from pydantic_ai._file_input import KNOWN_DOCUMENT_MEDIA_TYPES, TEXT_DOCUMENT_MEDIA_TYPES, FileInputKind
from pydantic_ai._json_schema import JsonSchemaTransformer
from pydantic_ai._output import DEFAULT_OUTPUT_TOOL_NAME
from pydantic_ai._thinking_part import render_replayed_thinking, split_content_into_text_and_thinking
from pydantic_ai._utils import guard_tool_call_id, is_text_like_media_type, now_utc, number_to_datetime
from pydantic_ai.exceptions import ModelAPIError, UserError
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CachePoint,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    InstructionBaselinePart,
    InstructionDeltaPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    ModelSettingsDeltaPart,
    NativeToolCallPart,
    NativeToolReturnPart,
    PartStartEvent,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserContent,
    UserPromptPart,
    VideoUrl,
)
from pydantic_ai.models import (
    Model,
    ModelRequestParameters,
    StreamedResponse,
    _customize_tool_def,  # pyright: ignore[reportPrivateUsage]
    _sendable_request_parts,  # pyright: ignore[reportPrivateUsage]
    check_allow_model_requests,
    download_item,
    get_user_agent,
)
from pydantic_ai.models._tool_choice import resolve_tool_choice, support_tool_forcing, tool_forcing_unavailable_reason
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.profiles import ModelProfile, merge_profile
from pydantic_ai.profiles._family import vendor_family_model_profile
from pydantic_ai.profiles._special_tokens import special_token_route_profile
from pydantic_ai.profiles.amazon import amazon_model_profile
from pydantic_ai.profiles.groq import groq_model_profile
from pydantic_ai.profiles.mistral import mistral_model_profile
from pydantic_ai.profiles.openai import (
    SAMPLING_PARAMS,
    OpenAIJsonSchemaTransformer,
    OpenAIModelProfile,
    openai_model_profile,
)
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from popagent_agent_runner.llm.stream import LeanStreamedResponse, TurnSink, current_turn_sink, streaming_to
from popagent_agent_runner.llm.wire import (
    CHAT_FINISH_REASON_MAP,
    DONE,
    PACE_READS,
    ModelFailure,
    SSEDecoder,
    classify_model_error,
    map_logprobs,
    map_usage,
    merge_leading_string_system_messages,
    resolve_reasoning_effort,
    split_content_parts,
    status_error,
    stream_error,
    transport_error,
)

__all__ = [
    "LeanModels",
    "LeanOpenAIModel",
    "ModelFailure",
    "TurnSink",
    "classify_model_error",
    "compatible_model_profile",
    "current_turn_sink",
    "streaming_to",
]

DEFAULT_TIMEOUT: Any = httpx.Timeout(600.0, connect=5.0)
"""pydantic-ai's default: long enough for a slow local model's first token, short to connect."""
DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
RETRYABLE_STATUSES = frozenset({408, 409, 429})
MERGE_SYSTEM_MESSAGES_FOR: tuple[str, ...] = ("qwen3.5-4b",)
"""Routes whose chat template takes one leading system message (matched on the model id after any `provider/`)."""

# `openai_*` settings sent as they are, under their wire names (as `OpenAIChatModel` sends them).
_OPENAI_PASSTHROUGH: dict[str, str] = {
    "openai_user": "user",
    "openai_prediction": "prediction",
    "openai_logprobs": "logprobs",
    "openai_top_logprobs": "top_logprobs",
    "openai_store": "store",
    "openai_moderation": "moderation",
    "openai_text_verbosity": "verbosity",
    "openai_prompt_cache_key": "prompt_cache_key",
    "openai_prompt_cache_retention": "prompt_cache_retention",
    "openai_prompt_cache_options": "prompt_cache_options",
}
_OPENAI_HANDLED = frozenset({*_OPENAI_PASSTHROUGH, "openai_reasoning_effort", "openai_service_tier"})


def _mistral_model_profile(model_name: str) -> ModelProfile:
    profile = mistral_model_profile(model_name)
    if model_name.startswith("magistral"):
        return profile
    return merge_profile(openai_model_profile(model_name), profile)


_VENDOR_PROFILES = {
    "bedrock": amazon_model_profile,
    "groq": groq_model_profile,
    "mistral": _mistral_model_profile,
    "mistralai": _mistral_model_profile,
}


def compatible_model_profile(model_name: str) -> ModelProfile:
    """The profile `OpenAICompatibleProvider.model_profile` gives `model_name`, built without importing the openai SDK.

    A `vendor/model` id gets that vendor's family profile, anything else the profile OpenAI-compatible
    servers share; a test checks it against the provider's own for a list of ids.
    """
    profile = vendor_family_model_profile(model_name, overrides=_VENDOR_PROFILES)
    if profile is None:
        profile = openai_model_profile(model_name)
    return merge_profile(
        OpenAIModelProfile(json_schema_transformer=OpenAIJsonSchemaTransformer),
        profile,
        special_token_route_profile("openai-compatible", model_name),
    )


# Transformed tool schemas by (transformer, schema, strict): the schema as JSON and the resulting strictness.
_CUSTOMIZED_TOOLS: dict[tuple[type[JsonSchemaTransformer], bytes, bool | None], tuple[bytes, bool | None]] = {}
MAX_CUSTOMIZED_TOOLS = 1024


def _customized_tool(transformer: type[JsonSchemaTransformer], tool_def: ToolDefinition) -> ToolDefinition:
    """`_customize_tool_def(transformer, tool_def)`, computed once per distinct schema (a fresh copy each time)."""
    try:
        schema_key = orjson.dumps(tool_def.parameters_json_schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not plain JSON: nothing to key it by
        return _customize_tool_def(transformer, tool_def)
    key = (transformer, schema_key, tool_def.strict)
    known = _CUSTOMIZED_TOOLS.get(key)
    if known is None:
        customized = _customize_tool_def(transformer, tool_def)
        if len(_CUSTOMIZED_TOOLS) >= MAX_CUSTOMIZED_TOOLS:
            _CUSTOMIZED_TOOLS.clear()
        _CUSTOMIZED_TOOLS[key] = (orjson.dumps(customized.parameters_json_schema), customized.strict)
        return customized
    schema, strict = known
    return replace(tool_def, parameters_json_schema=orjson.loads(schema), strict=strict)


@dataclass
class _AssistantMessage:
    """The parts of one `ModelResponse` collected into one Chat Completions assistant message."""

    texts: list[str] = field(default_factory=list[str])
    thinkings: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    carried_thinkings: list[str] = field(default_factory=list[str])
    tool_calls: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    def to_wire(self) -> dict[str, Any] | None:
        # No message at all for an empty response: the API rejects an assistant message with neither.
        if not self.texts and not self.tool_calls:
            return None
        message: dict[str, Any] = {"role": "assistant"}
        for name, contents in self.thinkings.items():
            message[name] = "\n\n".join(contents)
        message["content"] = "\n\n".join(self.texts) if self.texts else None
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


@dataclass(init=False)
class LeanOpenAIModel(Model[Any]):
    """A pydantic-ai model for an OpenAI-compatible Chat Completions server (9Router, vLLM, llama.cpp, ...).

    Pass the same instance to every agent: it holds one keep-alive connection pool. The turn's text
    goes to the `TurnSink` set with `streaming_to(sink)` around the agent run.
    """

    _unsupported_file_inputs: ClassVar[frozenset[FileInputKind]] = frozenset({"video"})
    _relocates_tool_files: ClassVar[bool] = True
    unsupported_settings = frozenset({"top_k"})

    _model_name: str = field(repr=False)
    _base_url: str = field(repr=False)
    _provider_name: str = field(repr=False)

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str,
        api_key: str | None = None,
        provider_name: str = "ninerouter",
        http_client: httpx.AsyncClient | None = None,
        profile: ModelProfile | Callable[[str], ModelProfile | None] | None = None,
        settings: ModelSettings | None = None,
        coalesce_window: float = 0.02,
        max_retries: int = 0,
        merge_system_messages_for: Iterable[str] = MERGE_SYSTEM_MESSAGES_FOR,
    ) -> None:
        """Create a model.

        Args:
            model_name: The model id the server knows, provider prefix included (`fake/fake-chat`); sent unchanged.
            base_url: The server's OpenAI base URL, ending in `/v1` (`NINEROUTER_URL`).
            api_key: Sent as `Authorization: Bearer <api_key>` (`NINEROUTER_API_KEY`); none when `None`.
            provider_name: The service's name in message history and telemetry, as `OpenAICompatibleProvider`'s `name`.
            http_client: A client to share; by default the model opens its own (close it with `aclose`).
            profile: Merged over the default profile, or a function replacing it, as a provider's `profile=`.
            settings: Default model settings.
            coalesce_window: Seconds of streamed text merged into one pydantic-ai event (the sink gets every delta).
            max_retries: Retries of a request that failed before its response began (connection errors,
                408/409/429/5xx), honouring `Retry-After`; the `max_retries` model setting overrides it.
            merge_system_messages_for: Model ids (after any `provider/` prefix) whose leading string system
                messages are merged into one.
        """
        self._model_name = model_name
        self._base_url = base_url.rstrip("/") + "/"
        self._provider_name = provider_name
        self._provider_profile = profile
        self._chat_url = self._base_url + "chat/completions"
        self._own_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._coalesce_window = coalesce_window
        self._max_retries = max_retries
        self._merge_system_messages = model_name.rsplit("/", 1)[-1] in set(merge_system_messages_for)
        # The provider-level `profile=` is applied in `_provider_model_profile`, so the model-level one stays unset.
        super().__init__(settings=settings, profile=None)

    async def aclose(self) -> None:
        """Close the HTTP client if the model opened it."""
        if self._own_client:
            await self._client.aclose()

    def customize_request_parameters(self, model_request_parameters: ModelRequestParameters) -> ModelRequestParameters:
        """`Model`'s customization, with each function tool's transformed schema remembered.

        pydantic-ai walks every tool's JSON schema through the profile's transformer on every model
        request; a turn's agents offer the same tools request after request, and the walk (~0.1 ms per
        tool, five tools on the supervisor) was the largest single piece of a turn's setup before its
        first token. The result depends only on the transformer, the schema and the tool's strictness.
        """
        transformer = self.profile.get("json_schema_transformer")
        params = model_request_parameters
        if transformer is None or not params.function_tools:
            return super().customize_request_parameters(params)
        customized = super().customize_request_parameters(replace(params, function_tools=[]))
        return replace(customized, function_tools=[_customized_tool(transformer, t) for t in params.function_tools])

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return self._provider_name

    @property
    def base_url(self) -> str:
        return self._base_url

    # -- profile, as `OpenAIChatModel` with an `OpenAICompatibleProvider` resolves it ------------------------------

    def _provider_model_profile(self) -> ModelProfile:
        override = self._provider_profile
        if callable(override):
            return override(self._model_name) or {}
        default = compatible_model_profile(self._model_name)
        return default if override is None else merge_profile(default, override)

    def _instance_profile_defaults(self, profile: ModelProfile) -> ModelProfile:
        # Chat Completions rejects a `'12h'` prompt cache TTL, as `OpenAIChatModel` notes.
        retentions = profile.get("supported_cache_retentions", ())
        if "12h" not in retentions:
            return profile
        return merge_profile(
            profile, ModelProfile(supported_cache_retentions=tuple(tier for tier in retentions if tier != "12h"))
        )

    @cached_property
    def profile(self) -> OpenAIModelProfile:
        profile = super().profile
        if not profile.get("openai_chat_supports_document_input", True):
            document_media_types = profile.get("supported_document_media_types", KNOWN_DOCUMENT_MEDIA_TYPES)
            profile = merge_profile(
                profile, ModelProfile(supported_document_media_types=document_media_types & TEXT_DOCUMENT_MEDIA_TYPES)
            )
        return cast(OpenAIModelProfile, profile)

    def _unsupported_settings(self) -> frozenset[str]:
        return self.unsupported_settings | frozenset(self.profile.get("openai_unsupported_model_settings", ()))

    # -- thinking ---------------------------------------------------------------------------------------------

    def _request_thinks(
        self, model_settings: ModelSettings | None, model_request_parameters: ModelRequestParameters
    ) -> bool:
        settings = cast(Mapping[str, Any], model_settings or {})
        effort = settings.get("openai_reasoning_effort")
        if effort is not None:
            return effort != "none"
        thinking = model_request_parameters.thinking
        if thinking is not None:
            return thinking is not False or self.profile.get("thinking_always_enabled", False)
        return self.profile.get("thinking_enabled_by_default", False)

    def _settings_overriding_thinking(self, model_settings: Mapping[str, object]) -> tuple[str, ...]:
        return ("openai_reasoning_effort",) if model_settings.get("openai_reasoning_effort") else ()

    def _overrides_unified_effort(self, model_settings: Mapping[str, object]) -> bool:
        return bool(self._settings_overriding_thinking(model_settings))

    def _auto_thinking_field(self, part: ThinkingPart) -> str | None:
        custom_field = self.profile.get("openai_chat_thinking_field", None)
        if (
            part.id
            and part.id != "content"
            and part.provider_name == self.system
            and (not custom_field or part.id == custom_field)
        ):
            return part.id
        return None

    def _carries_thinking_in_user_turn(self, message: ModelResponse, part: ThinkingPart) -> bool:
        if not part.content or not self.profile.get("mimics_assistant_message_formatting", False):
            return False
        send_back = self.profile.get("openai_chat_send_back_thinking_parts", "auto")
        return send_back == "tags" or (send_back == "auto" and self._auto_thinking_field(part) is None)

    # -- requests ---------------------------------------------------------------------------------------------

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        check_allow_model_requests()
        sink = current_turn_sink()
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        if sink is not None:
            return await self._request_through(sink, messages, model_settings, model_request_parameters)
        request = await self._build_request(messages, False, model_settings or {}, model_request_parameters)
        response = await self._send(request, stream=False, settings=model_settings or {})
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError as error:
            raise ModelAPIError(
                model_name=self._model_name, message=f"Failed to decode response as JSON: {error}"
            ) from error
        return self._process_response(data)

    async def _request_through(
        self,
        sink: TurnSink,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """A request streamed from the server with its text handed to `sink` as it arrives, answered to
        pydantic-ai as one finished response (what `request_stream` would have assembled).

        A turn's agents run unstreamed for pydantic-ai (`turn.agent_runs`), which spares its per-event
        stream machinery, while the user still sees every token at once. pydantic-ai is handed nothing
        until the response is complete, so its deltas are merged whole (an unbounded window).
        """
        request = await self._build_request(messages, True, model_settings or {}, params)
        response = await self._send(request, stream=True, settings=model_settings or {})
        try:
            stream = await self._open_stream(response, params, sink, window=math.inf)
            # Once the first text went to the sink, read no more often than the sink forwards it
            # (reasoning before it is read as it comes: the answer's first token must not wait).
            interval: float = getattr(sink, "forward_interval_s", 0.0)
            pace = response.extensions.get(PACE_READS) if interval else None
            async for event in stream:
                if pace is not None and isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    pace(interval)
                    pace = None
            return stream.get()
        finally:
            await response.aclose()

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        check_allow_model_requests()
        sink = current_turn_sink()
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        request = await self._build_request(messages, True, model_settings or {}, model_request_parameters)
        response = await self._send(request, stream=True, settings=model_settings or {})
        try:
            yield await self._open_stream(response, model_request_parameters, sink)
        finally:
            await response.aclose()

    async def _open_stream(
        self,
        response: httpx.Response,
        params: ModelRequestParameters,
        sink: TurnSink | None,
        window: float | None = None,
    ) -> LeanStreamedResponse:
        # Read up to the first event before handing the stream over, as `OpenAIChatModel` peeks: an
        # error event or an empty stream fails the request itself, and the model name comes from it.
        chunks = response.aiter_bytes()
        decoder = SSEDecoder()
        backlog: list[bytes] = []
        try:
            async for raw in chunks:
                backlog.extend(decoder.feed(raw))
                if backlog:
                    break
            else:
                backlog.extend(decoder.close())
        except httpx.TransportError as error:
            raise transport_error(self._model_name, error) from error
        if not backlog or backlog[0].startswith(DONE):
            raise UnexpectedModelBehavior("Streamed response ended without content or tool calls")
        try:
            first = orjson.loads(backlog[0])
        except orjson.JSONDecodeError as error:
            raise ModelAPIError(
                model_name=self._model_name, message=f"Failed to decode response as JSON: {error}"
            ) from error
        if not isinstance(first, dict):
            raise ModelAPIError(model_name=self._model_name, message=f"Unexpected stream event: {backlog[0][:200]!r}")
        if error_body := first.get("error"):
            raise stream_error(self._model_name, error_body)
        stream = LeanStreamedResponse(
            model_request_parameters=params,
            _model_name=first.get("model") or self._model_name,
            _model_profile=self.profile,
            _provider_name=self._provider_name,
            _provider_url=self._base_url,
            _response=response,
            _bytes=chunks,
            _decoder=decoder,
            _first_chunk=first,
            _backlog=backlog[1:],
            _sink=sink,
            _window=self._coalesce_window if window is None else window,
        )
        stream.canonical_system = self._canonical_system_stamp
        return stream

    async def _send(self, request: httpx.Request, *, stream: bool, settings: ModelSettings) -> httpx.Response:
        """Send `request`, retrying failures before the response began if asked to; raise the mapped error."""
        max_retries = settings.get("max_retries", self._max_retries)
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.TransportError as error:
                if attempt >= max_retries:
                    raise transport_error(self._model_name, error) from error
            else:
                if response.status_code < 400:
                    return response
                content = await response.aread()
                await response.aclose()
                error = status_error(self._model_name, response.status_code, content, response.headers)
                if attempt >= max_retries or not _retryable(response.status_code):
                    raise error
                retry_after = error.retry_after
            attempt += 1
            await asyncio.sleep(_retry_delay(attempt, retry_after))

    async def _build_request(
        self,
        messages: list[ModelMessage],
        stream: bool,
        model_settings: ModelSettings,
        params: ModelRequestParameters,
    ) -> httpx.Request:
        settings = dict(cast(Mapping[str, Any], model_settings))
        unknown = sorted(k for k in settings if k.startswith("openai_") and k not in _OPENAI_HANDLED)
        if unknown:
            raise UserError(f"LeanOpenAIModel does not support {unknown}; pass wire fields with `extra_body`.")
        profile = self.profile

        tools, tool_choice = self._tools_and_choice(model_settings, params)
        wire_messages = await self._map_messages(messages, params, model_settings)

        response_format: dict[str, Any] | None = None
        if params.output_mode == "native":
            assert params.output_object is not None
            response_format = self._map_json_schema(params.output_object)
        elif params.output_mode == "prompted" and profile.get("supports_json_object_output", False):
            response_format = {"type": "json_object"}

        self._drop_sampling_params_for_reasoning(settings, params)
        for name in profile.get("openai_unsupported_model_settings", ()):
            settings.pop(name, None)

        if self._merge_system_messages:
            wire_messages = merge_leading_string_system_messages(wire_messages)
        body: dict[str, Any] = {"model": self._model_name, "messages": wire_messages}
        if tools:
            if "parallel_tool_calls" in settings:
                body["parallel_tool_calls"] = settings["parallel_tool_calls"]
            body["tools"] = tools
            if tool_choice:
                body["tool_choice"] = tool_choice
        # Always explicit: 9Router answers a request without `stream` as a stream.
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        if "stop_sequences" in settings:
            body["stop"] = settings["stop_sequences"]
        if "max_tokens" in settings:
            key = (
                "max_completion_tokens"
                if profile.get("openai_chat_supports_max_completion_tokens", True)
                else "max_tokens"
            )
            body[key] = settings["max_tokens"]
        if response_format:
            body["response_format"] = response_format
        for name in ("seed", "temperature", "top_p", "presence_penalty", "frequency_penalty", "logit_bias"):
            if name in settings:
                body[name] = settings[name]
        if (effort := self._reasoning_effort(settings, params)) is not None:
            body["reasoning_effort"] = effort
        if service_tier := settings.get("openai_service_tier") or settings.get("service_tier"):
            body["service_tier"] = service_tier
        for name, wire_name in _OPENAI_PASSTHROUGH.items():
            if name in settings:
                body[wire_name] = settings[name]
        if (extra_body := self._extra_body(settings, params)) is not None:
            body.update(cast(Mapping[str, Any], extra_body))

        headers = self._headers
        if extra_headers := settings.get("extra_headers"):
            headers = {**headers, **extra_headers}
        if all(name.lower() != "user-agent" for name in headers):
            headers = {**headers, "User-Agent": get_user_agent()}
        return self._client.build_request(
            "POST",
            self._chat_url,
            content=orjson.dumps(body),
            headers=headers,
            timeout=self._timeout(settings.get("timeout")),
        )

    def _timeout(self, value: Any) -> Any:
        if value is None:
            return self._client.timeout
        if isinstance(value, int | float):
            # Like pydantic-ai's own clients: a per-request timeout can shorten, never lengthen, connecting.
            base = self._client.timeout
            connect = value if base.connect is None else min(value, base.connect)
            pool = value if base.pool is None else min(value, base.pool)
            return httpx.Timeout(value, connect=connect, pool=pool)
        return value

    def _reasoning_effort(self, settings: Mapping[str, Any], params: ModelRequestParameters) -> str | None:
        if effort := settings.get("openai_reasoning_effort"):
            return effort
        thinking = params.thinking
        if thinking is None:
            return None
        if thinking is False and "openai_chat_thinking_false_body" in self.profile:
            return None
        return resolve_reasoning_effort(
            thinking, self.profile, supports_max=self.profile.get("openai_chat_supports_max_reasoning_effort", False)
        )

    def _extra_body(self, settings: Mapping[str, Any], params: ModelRequestParameters) -> object | None:
        extra_body = settings.get("extra_body")
        false_body = self.profile.get("openai_chat_thinking_false_body")
        if false_body is None or params.thinking is not False or settings.get("openai_reasoning_effort"):
            return extra_body
        return {**false_body, **cast(dict[str, Any], extra_body or {})}

    def _drop_sampling_params_for_reasoning(self, settings: dict[str, Any], params: ModelRequestParameters) -> None:
        profile = self.profile
        if not profile.get("openai_supports_reasoning", False):
            return
        supported = profile.get("openai_reasoning_efforts")
        supports_none = (
            "none" in supported
            if supported is not None
            else profile.get("openai_supports_reasoning_effort_none", False)
        )
        if supports_none and not self._request_thinks(cast(ModelSettings, settings), params):
            return
        if dropped := [k for k in SAMPLING_PARAMS if k in settings]:
            warnings.warn(
                f"Sampling parameters {dropped} are not supported when reasoning is enabled. These settings will be ignored.",
                UserWarning,
                stacklevel=4,
            )
        for name in SAMPLING_PARAMS:
            settings.pop(name, None)

    # -- tools ---------------------------------------------------------------------------------------------

    def _tools_and_choice(
        self, model_settings: ModelSettings, params: ModelRequestParameters
    ) -> tuple[list[dict[str, Any]], Any]:
        resolved = resolve_tool_choice(model_settings, params)
        tool_defs = params.declared_tool_defs
        tool_choice: Any
        if resolved in ("auto", "none"):
            tool_choice = resolved
        elif resolved == "required":
            tool_choice = "required" if self._supports_tool_forcing(model_settings, params) else "auto"
        elif isinstance(resolved, tuple):
            mode, names = resolved
            supports = self._supports_tool_forcing(model_settings, params)
            effective_mode = "auto" if mode == "auto" or not supports else mode
            if mode == "required" and len(names) == 1 and supports:
                tool_choice = {"type": "function", "function": {"name": next(iter(names))}}
            elif self.profile.get("openai_chat_supports_allowed_tools", False):
                tool_choice = {
                    "type": "allowed_tools",
                    "allowed_tools": {
                        "mode": effective_mode,
                        "tools": [{"type": "function", "function": {"name": n}} for n in tool_defs if n in names],
                    },
                }
            else:
                tool_defs = {k: v for k, v in tool_defs.items() if k in names}
                tool_choice = effective_mode
        else:
            assert_never(resolved)
        tools = [self._map_tool_definition(t) for t in tool_defs.values()]
        return tools, (tool_choice if tools else None)

    def _supports_tool_forcing(self, model_settings: ModelSettings, params: ModelRequestParameters) -> bool:
        thinking = self._request_thinks(model_settings, params)
        return support_tool_forcing(
            self._model_name,
            model_settings,
            tool_forcing_unavailable_reason(
                self.profile,
                thinking=thinking,
                thinking_remedy="Disable thinking with `thinking=False` or `openai_reasoning_effort='none'`",
            ),
            disables_thinking=thinking and self.profile.get("forced_tool_choice_disables_thinking", False),
        )

    def _map_tool_definition(self, tool: ToolDefinition) -> dict[str, Any]:
        function: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.parameters_json_schema,
        }
        if tool.strict and self.profile.get("openai_supports_strict_tool_definition", True):
            function["strict"] = tool.strict
        return {"type": "function", "function": function}

    def _map_json_schema(self, output: OutputObjectDefinition) -> dict[str, Any]:
        schema: dict[str, Any] = {"name": output.name or DEFAULT_OUTPUT_TOOL_NAME, "schema": output.json_schema}
        if output.description:
            schema["description"] = output.description
        if self.profile.get("openai_supports_strict_tool_definition", True):
            schema["strict"] = output.strict
        return {"type": "json_schema", "json_schema": schema}

    # -- messages, mapped as `OpenAIChatModel._map_messages` maps them ---------------------------------------------

    async def _map_messages(
        self,
        messages: Sequence[ModelMessage],
        params: ModelRequestParameters,
        model_settings: ModelSettings,
    ) -> list[dict[str, Any]]:
        wire: list[dict[str, Any]] = []
        profile = self.profile
        send_back_thinking = profile.get("openai_chat_send_back_thinking_parts", "auto")
        backfill_field = profile.get("openai_chat_thinking_field", None) if send_back_thinking == "field" else None
        backfill = bool(
            backfill_field
            and profile.get("openai_chat_thinking_requires_field_on_tool_calls", False)
            and self._request_thinks(model_settings, params)
        )
        for message in messages:
            if isinstance(message, ModelRequest):
                async for item in self._map_request(message):
                    wire.append(item)
            elif isinstance(message, ModelResponse):
                backfill = backfill or any(isinstance(part, ThinkingPart) for part in message.parts)
                assistant = self._collect_response(message)
                if assistant.carried_thinkings:
                    wire.append({"role": "user", "content": "\n\n".join(assistant.carried_thinkings)})
                if (mapped := assistant.to_wire()) is not None:
                    if backfill and backfill_field and mapped.get("tool_calls") and backfill_field not in mapped:
                        mapped[backfill_field] = ""
                    wire.append(mapped)
            else:
                assert_never(message)
        if send_back_thinking == "auto":
            # As `OpenAIChatModel`: a tool-calling assistant turn after the last user message gets the one thinking
            # field the history already uses, empty, as DeepSeek-style APIs require it there.
            custom_field = profile.get("openai_chat_thinking_field", None)
            sent_fields = {
                name
                for m in wire
                if m["role"] == "assistant"
                for name in (custom_field, "reasoning", "reasoning_content")
                if name and name in m
            }
            if len(sent_fields) == 1:
                (sent_field,) = sent_fields
                last_user = max((i for i, m in enumerate(wire) if m["role"] == "user"), default=-1)
                for m in wire[last_user + 1 :]:
                    if m["role"] == "assistant" and m.get("tool_calls") and sent_field not in m:
                        m[sent_field] = ""
        role = profile.get("openai_system_prompt_role", None) or "system"
        leading = next((i for i, m in enumerate(wire) if m.get("role") != role), len(wire))
        if instruction_parts := self._get_instruction_parts(messages, params):
            wire[leading:leading] = [{"role": role, "content": part.content} for part in instruction_parts]
            leading += len(instruction_parts)
        if (
            not profile.get("openai_chat_supports_multiple_system_messages", True)
            and role in ("system", "developer")
            and leading >= 2
        ):
            merged = {**wire[0], "content": "\n\n".join(m["content"] for m in wire[:leading])}
            wire = [merged, *wire[leading:]]
        return wire

    async def _map_request(self, message: ModelRequest) -> AsyncIterable[dict[str, Any]]:
        file_content: list[UserContent] = []
        for part in _sendable_request_parts(message.parts):
            if isinstance(part, SystemPromptPart):
                yield {"role": self.profile.get("openai_system_prompt_role", None) or "system", "content": part.content}
            elif isinstance(part, UserPromptPart):
                yield await self._map_user_prompt(part)
            elif isinstance(part, ToolReturnPart):
                tool_text, tool_files = part.model_response_str_and_user_content()
                file_content.extend(tool_files)
                yield {"role": "tool", "tool_call_id": guard_tool_call_id(t=part), "content": tool_text}
            elif isinstance(part, InstructionBaselinePart | InstructionDeltaPart | ModelSettingsDeltaPart | SpeechPart):
                raise UserError(
                    f"`{type(part).__name__}` cannot be sent as it is: call `model.prepare_messages(messages)` first "
                    "(`Agent` does)."
                )
            else:
                raise UserError(f"`{type(part).__name__}` is not supported by LeanOpenAIModel.")
        if file_content:
            yield await self._map_user_prompt(UserPromptPart(content=file_content))

    async def _map_user_prompt(self, part: UserPromptPart) -> dict[str, Any]:
        if isinstance(part.content, str):
            return {"role": "user", "content": part.content}
        content: list[dict[str, Any]] = []
        for item in part.content:
            if isinstance(item, CachePoint):
                if self.profile.get("openai_supports_prompt_cache_breakpoints", False):
                    raise UserError("Prompt cache breakpoints are not supported by LeanOpenAIModel.")
                continue
            content.append(await self._map_content_item(item))
        return {"role": "user", "content": content}

    async def _map_content_item(self, item: UserContent) -> dict[str, Any]:
        profile = self.profile
        if isinstance(item, str | TextContent):
            return {"text": item if isinstance(item, str) else item.content, "type": "text"}
        if isinstance(item, ImageUrl):
            image_url: dict[str, Any] = {"url": item.url}
            if metadata := item.vendor_metadata:
                image_url["detail"] = metadata.get("detail", "auto")
            if item.force_download:
                image_url["url"] = (await download_item(item, data_format="base64_uri", type_format="extension"))[
                    "data"
                ]
            return {"image_url": image_url, "type": "image_url"}
        if isinstance(item, BinaryContent):
            if is_text_like_media_type(item.media_type):
                return self._inline_text(item.data.decode("utf-8"), item.media_type, item.identifier)
            if item.is_image:
                image_url = {"url": item.data_uri}
                if metadata := item.vendor_metadata:
                    image_url["detail"] = metadata.get("detail", "auto")
                return {"image_url": image_url, "type": "image_url"}
            if item.is_audio:
                data = (
                    item.data_uri if profile.get("openai_chat_audio_input_encoding", "base64") == "uri" else item.base64
                )
                return {"input_audio": {"data": data, "format": item.format}, "type": "input_audio"}
            if item.is_document:
                self._check_document_input()
                return {"file": {"file_data": item.data_uri, "filename": f"filename.{item.format}"}, "type": "file"}
            raise NotImplementedError(f"{item.media_type} content is not supported in Chat Completions user prompts")
        if isinstance(item, AudioUrl):
            encoding = "base64_uri" if profile.get("openai_chat_audio_input_encoding", "base64") == "uri" else "base64"
            downloaded = await download_item(item, data_format=encoding, type_format="extension")
            return {
                "input_audio": {"data": downloaded["data"], "format": downloaded["data_type"]},
                "type": "input_audio",
            }
        if isinstance(item, DocumentUrl):
            if not item.force_download and profile.get("openai_chat_supports_file_urls", False):
                return {"file": {"file_data": item.url, "filename": f"filename.{item.format}"}, "type": "file"}
            if is_text_like_media_type(item.media_type):
                text = await download_item(item, data_format="text")
                return self._inline_text(text["data"], item.media_type, item.identifier)
            self._check_document_input()
            downloaded = await download_item(item, data_format="base64_uri", type_format="extension")
            return {
                "file": {"file_data": downloaded["data"], "filename": f"filename.{downloaded['data_type']}"},
                "type": "file",
            }
        if isinstance(item, VideoUrl):
            raise NotImplementedError("VideoUrl is not supported in OpenAI Chat Completions user prompts")
        if isinstance(item, UploadedFile):
            self._validate_uploaded_file_provider(item)
            if item.media_type.startswith("image/"):
                raise UserError("Referencing an uploaded image by `file_id` is not supported by Chat Completions.")
            return {"file": {"file_id": item.file_id}, "type": "file"}
        raise UserError(f"`{type(item).__name__}` is not supported by LeanOpenAIModel.")

    def _inline_text(self, text: str, media_type: str, identifier: str) -> dict[str, Any]:
        return {
            "text": self._format_inlined_text_file(text, media_type=media_type, identifier=identifier),
            "type": "text",
        }

    def _check_document_input(self) -> None:
        if not self.profile.get("openai_chat_supports_document_input", True):
            raise UserError(
                f"The {self._provider_name!r} provider does not support document input via Chat Completions."
            )

    def _collect_response(self, message: ModelResponse) -> _AssistantMessage:
        collected = _AssistantMessage()
        profile = self.profile
        send_back = profile.get("openai_chat_send_back_thinking_parts", "auto")
        for part in message.parts:
            if isinstance(part, TextPart):
                collected.texts.append(part.content)
            elif isinstance(part, ThinkingPart):
                if send_back == "auto" and (name := self._auto_thinking_field(part)):
                    collected.thinkings.setdefault(name, []).append(part.content)
                elif send_back in ("auto", "tags"):
                    text, carry = render_replayed_thinking(part.content, profile)
                    if not carry:
                        collected.texts.append(text)
                    elif part.content:
                        collected.carried_thinkings.append(text)
                elif send_back == "field" and (name := profile.get("openai_chat_thinking_field", None)):
                    collected.thinkings.setdefault(name, []).append(part.content)
            elif isinstance(part, ToolCallPart):
                call: dict[str, Any] = {
                    "id": guard_tool_call_id(t=part),
                    "type": "function",
                    "function": {"name": part.tool_name, "arguments": part.args_as_json_str()},
                }
                if (
                    part.provider_details
                    and (extra_content := part.provider_details.get("extra_content"))
                    and self.accepts_stateless_artifacts(message, part)
                ):
                    call["extra_content"] = extra_content
                collected.tool_calls.append(call)
            elif isinstance(part, NativeToolCallPart | NativeToolReturnPart | FilePart | CompactionPart):
                # Not sent back to Chat Completions, as `OpenAIChatModel` doesn't.
                pass
            elif isinstance(part, SpeechPart):
                raise UserError("`SpeechPart` cannot be sent as it is: call `model.prepare_messages(messages)` first.")
            else:
                assert_never(part)
        return collected

    # -- a complete (non-streamed) response ------------------------------------------------------------------

    def _process_response(self, data: Any) -> ModelResponse:
        if not isinstance(data, dict):
            raise UnexpectedModelBehavior(
                f"Invalid response from {self.system} chat completions endpoint, expected JSON data"
            )
        data = cast(dict[str, Any], data)
        timestamp = now_utc()
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UnexpectedModelBehavior(f"Invalid response from {self.system} chat completions endpoint: no choices")
        choice = cast(dict[str, Any], choices[0])
        message = choice.get("message")
        if not isinstance(message, dict):
            raise UnexpectedModelBehavior(f"Invalid response from {self.system} chat completions endpoint: no message")
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
            map_usage(usage, self._provider_name, self._base_url, self._model_name)
            if isinstance(usage, dict)
            else RequestUsage(unmeasured_requests=1)
        )
        created = data.get("created")
        common: dict[str, Any] = {
            "usage": request_usage,
            "model_name": data.get("model") or self._model_name,
            "provider_response_id": data.get("id") or None,
            "provider_name": self._provider_name,
            "provider_url": self._base_url,
            "canonical_system": self._canonical_system_stamp,
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
        for name in (self.profile.get("openai_chat_thinking_field", None), "reasoning", "reasoning_content"):
            if not name or not (reasoning := message.get(name)):
                continue
            if not isinstance(reasoning, str):
                warnings.warn(
                    f"Unexpected non-string value for {name!r}: {type(reasoning).__name__}.", UserWarning, stacklevel=2
                )
                continue
            parts.append(ThinkingPart(id=name, content=reasoning, provider_name=self._provider_name))
            break
        content = split_content_parts(message.get("content"))
        for text_part in split_content_into_text_and_thinking(
            content if isinstance(content, str) else "", self.profile.get("thinking_tags", ("<think>", "</think>"))
        ):
            if isinstance(text_part, ThinkingPart):
                text_part.id, text_part.provider_name = "content", self._provider_name
            parts.append(text_part)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            extra_content = call.get("extra_content")
            part_details = {"extra_content": extra_content} if extra_content else None
            tool_call = ToolCallPart(
                function.get("name", ""),
                function.get("arguments"),
                tool_call_id=call.get("id"),
                provider_name=self._provider_name if part_details else None,
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


class LeanModels:
    """The models of one OpenAI-compatible server (`NINEROUTER_URL`), sharing one keep-alive connection pool.

    A chat picks its model per request; `get` gives the model for an id, built once and kept.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        provider_name: str = "ninerouter",
        http_client: httpx.AsyncClient | None = None,
        coalesce_window: float = 0.02,
        max_retries: int = 0,
        merge_system_messages_for: Iterable[str] = MERGE_SYSTEM_MESSAGES_FOR,
    ) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._provider_name = provider_name
        self._own_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS)
        self._coalesce_window = coalesce_window
        self._max_retries = max_retries
        self._merge_system_messages_for = tuple(merge_system_messages_for)
        self._models: dict[str, LeanOpenAIModel] = {}

    def preload(self) -> None:
        """Pay the one-time cost of building a model now rather than in the first turn.

        pydantic-ai loads genai-prices' data snapshot when its first `Model` is built: 0.1 s of CPU
        (0.3 s where bytecode is not cached), which the first chat after start would wait for.
        """
        LeanOpenAIModel("preload", base_url=self._base_url, http_client=self._client)

    def get(self, model_name: str) -> LeanOpenAIModel:
        """The model for `model_name`, the id exactly as the server lists it (`fake/fake-chat`)."""
        model = self._models.get(model_name)
        if model is None:
            model = self._models[model_name] = LeanOpenAIModel(
                model_name,
                base_url=self._base_url,
                api_key=self._api_key,
                provider_name=self._provider_name,
                http_client=self._client,
                coalesce_window=self._coalesce_window,
                max_retries=self._max_retries,
                merge_system_messages_for=self._merge_system_messages_for,
            )
        return model

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _retryable(status_code: int) -> bool:
    return status_code in RETRYABLE_STATUSES or status_code >= 500


def _retry_delay(attempt: int, retry_after: float | None) -> float:
    # The openai SDK's policy: the server's `Retry-After` when it is sensible, else backoff with jitter.
    if retry_after is not None and 0 < retry_after <= 60:
        return retry_after
    return min(0.5 * 2 ** (attempt - 1), 8.0) * (1 - 0.25 * random.random())
