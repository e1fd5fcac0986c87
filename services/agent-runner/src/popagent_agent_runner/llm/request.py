"""Request encoding: how `LeanOpenAIModel` resolves its profile and turns pydantic-ai messages, tools and
settings into the Chat Completions request `OpenAIChatModel` would send.

`ChatRequestEncoding` is the request half of `LeanOpenAIModel`, kept apart so the model itself stays
the exchange with the server: it is a `Model` base because the encoding overrides `Model`'s profile
and thinking hooks and calls its message-preparation helpers (`_get_instruction_parts`, ...).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, Final, assert_never, cast

import httpx
import orjson
from pydantic_ai.exceptions import UserError
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
    ModelSettingsDeltaPart,
    NativeToolCallPart,
    NativeToolReturnPart,
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
from pydantic_ai.models import Model, ModelRequestParameters, download_item, get_user_agent
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.profiles import ModelProfile, merge_profile
from pydantic_ai.profiles.openai import (
    OPENAI_REASONING_EFFORT_MAP,
    SAMPLING_PARAMS,
    OpenAIModelProfile,
    OpenAIReasoningEffort,
)
from pydantic_ai.settings import ModelSettings, ThinkingLevel
from pydantic_ai.tools import ToolDefinition

from popagent_agent_runner.llm.profile import compatible_model_profile
from popagent_agent_runner.llm.pydantic_ai_internals import (
    DEFAULT_OUTPUT_TOOL_NAME,
    KNOWN_DOCUMENT_MEDIA_TYPES,
    TEXT_DOCUMENT_MEDIA_TYPES,
    FileInputKind,
    JsonSchemaTransformer,
    customize_tool_def,
    guard_tool_call_id,
    is_text_like_media_type,
    render_replayed_thinking,
    resolve_tool_choice,
    sendable_request_parts,
    support_tool_forcing,
    tool_forcing_unavailable_reason,
)

__all__ = ["ChatRequestEncoding", "merge_leading_string_system_messages", "resolve_reasoning_effort"]

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


# Transformed tool schemas by (transformer, schema, strict): the schema as JSON and the resulting strictness.
_CUSTOMIZED_TOOLS: dict[tuple[type[JsonSchemaTransformer], bytes, bool | None], tuple[bytes, bool | None]] = {}
MAX_CUSTOMIZED_TOOLS = 1024


def _customized_tool(transformer: type[JsonSchemaTransformer], tool_def: ToolDefinition) -> ToolDefinition:
    """`customize_tool_def(transformer, tool_def)`, computed once per distinct schema (a fresh copy each time)."""
    try:
        schema_key = orjson.dumps(tool_def.parameters_json_schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not plain JSON: nothing to key it by
        return customize_tool_def(transformer, tool_def)
    key = (transformer, schema_key, tool_def.strict)
    known = _CUSTOMIZED_TOOLS.get(key)
    if known is None:
        customized = customize_tool_def(transformer, tool_def)
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


class ChatRequestEncoding(Model[Any]):
    """The request half of `LeanOpenAIModel`: profile, thinking, tools, messages and the request itself."""

    _unsupported_file_inputs: ClassVar[frozenset[FileInputKind]] = frozenset({"video"})
    _relocates_tool_files: ClassVar[bool] = True
    unsupported_settings = frozenset({"top_k"})

    # Set by `LeanOpenAIModel.__init__`.
    _model_name: str
    _provider_name: str
    _provider_profile: ModelProfile | Callable[[str], ModelProfile | None] | None
    _client: httpx.AsyncClient
    _chat_url: str
    _headers: dict[str, str]
    _merge_system_messages: bool
    _merged_request_headers: tuple[dict[str, str], httpx.Headers] | None = None

    # -- tool schemas ---------------------------------------------------------------------------------------------

    def customize_request_parameters(self, model_request_parameters: ModelRequestParameters) -> ModelRequestParameters:
        """`Model`'s customization, with each function tool's transformed schema remembered.

        pydantic-ai walks every tool's JSON schema through the profile's transformer on every model
        request; a turn's agents offer the same tools request after request, and the walk is the largest
        single piece of a turn's setup before its first token. The result depends only on the transformer, the schema and the tool's strictness.
        """
        transformer = self.profile.get("json_schema_transformer")
        params = model_request_parameters
        if transformer is None or not params.function_tools:
            return super().customize_request_parameters(params)
        customized = super().customize_request_parameters(replace(params, function_tools=[]))
        return replace(customized, function_tools=[_customized_tool(transformer, t) for t in params.function_tools])

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

    # -- the request --------------------------------------------------------------------------------------------

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
        extra_headers = settings.get("extra_headers")
        if extra_headers:
            headers = {**headers, **extra_headers}
        if all(name.lower() != "user-agent" for name in headers):
            headers = {**headers, "User-Agent": get_user_agent()}
        timeout = self._timeout(settings.get("timeout"))
        if extra_headers or self._client.cookies or self._client.base_url.raw_path != b"/" or self._client.params:
            return self._client.build_request(
                "POST", self._chat_url, content=orjson.dumps(body), headers=headers, timeout=timeout
            )
        # What `build_request` makes of the same arguments, without merging the client's headers and
        # URL again on every request (a third of a millisecond of the way to the first token).
        return httpx.Request(
            "POST",
            self._chat_request_url,
            headers=self._merged_headers(headers),
            content=orjson.dumps(body),
            extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        )

    @cached_property
    def _chat_request_url(self) -> httpx.URL:
        return httpx.URL(self._chat_url)

    def _merged_headers(self, headers: dict[str, str]) -> httpx.Headers:
        """The client's headers updated with `headers`, as `build_request` merges them (the client's are
        set once, where the model's client is made; `httpx.Request` copies what it is given)."""
        cached = self._merged_request_headers
        if cached is None or cached[0] != headers:
            merged = httpx.Headers(self._client.headers)
            merged.update(headers)
            cached = self._merged_request_headers = (headers, merged)
        return cached[1]

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
        for part in sendable_request_parts(message.parts):
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


# -- request shapes, on plain dicts ----------------------------------------------------------------------------------------------


def merge_leading_string_system_messages(messages: list[Any]) -> list[Any]:
    """Merge the consecutive leading `system` messages whose content is a string into one, joined by a blank line.

    For routes like the local llama.cpp `qwen3.5-4b`, whose chat template accepts a single leading
    system message. A system message with non-string content ends the run and is left as it is, and
    anything that isn't a list of message objects comes back unchanged.
    """
    if not isinstance(messages, list):
        return messages
    count = 0
    for message in messages:
        if not (
            isinstance(message, dict) and message.get("role") == "system" and isinstance(message.get("content"), str)
        ):
            break
        count += 1
    if count < 2:
        return messages
    merged = {**messages[0], "content": "\n\n".join(m["content"] for m in messages[:count])}
    return [merged, *messages[count:]]


_REASONING_EFFORT_ORDER: Final[tuple[OpenAIReasoningEffort, ...]] = (
    "none",
    "minimal",
    "low",
    "medium",
    "high",
    "xhigh",
    "max",
)


def resolve_reasoning_effort(
    thinking: ThinkingLevel, profile: ModelProfile, *, supports_max: bool
) -> OpenAIReasoningEffort | None:
    """Unified `thinking` as the closest `reasoning_effort` the model accepts, or `None` to send none.

    The rule of pydantic-ai's `resolve_openai_thinking_effort`, which lives in the openai package.
    """
    supported = cast("frozenset[OpenAIReasoningEffort] | None", profile.get("openai_reasoning_efforts"))
    if supported is None:
        if thinking is False and profile.get("thinking_always_enabled", False):
            return None
        if thinking == "minimal" and not profile.get("openai_supports_minimal_reasoning_effort", True):
            return "low"
        if thinking == "max" and supports_max:
            return "max"
        return OPENAI_REASONING_EFFORT_MAP[thinking]
    accepted: list[OpenAIReasoningEffort] = sorted(
        (effort for effort in supported if effort != "max" or supports_max), key=_REASONING_EFFORT_ORDER.index
    )
    if thinking is False:
        return next(iter(accepted), None)
    requested_effort = "max" if thinking == "max" and supports_max else OPENAI_REASONING_EFFORT_MAP[thinking]
    requested = _REASONING_EFFORT_ORDER.index(requested_effort)
    active: list[OpenAIReasoningEffort] = [effort for effort in accepted if effort != "none"]
    for effort in active:
        if _REASONING_EFFORT_ORDER.index(effort) >= requested:
            return effort
    return active[-1] if active else None
