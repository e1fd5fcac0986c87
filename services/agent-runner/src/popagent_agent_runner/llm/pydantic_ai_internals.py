"""Every private pydantic-ai name the lean model uses, in one place, so a pydantic-ai upgrade touches one file.

The lean model mirrors `OpenAIChatModel` (same requests, same assembled responses), and the
helpers that keep the two in step are private to pydantic-ai: message preparation, tool-schema
customization, thinking-tag handling, the special-token restorer, error categories. Nothing else
in the repository imports a private pydantic-ai name; `tests/agent_runner_model/test_pydantic_ai_internals.py`
imports each one from pydantic-ai itself and checks the private `Model`/`StreamedResponse` members
below, and fails naming whatever an upgrade removed or renamed.
"""

from __future__ import annotations

from pydantic_ai import _model_errors as model_errors
from pydantic_ai._file_input import KNOWN_DOCUMENT_MEDIA_TYPES, TEXT_DOCUMENT_MEDIA_TYPES, FileInputKind
from pydantic_ai._json_schema import JsonSchemaTransformer
from pydantic_ai._output import DEFAULT_OUTPUT_TOOL_NAME
from pydantic_ai._special_tokens import (
    _StreamedTextRestorer as StreamedTextRestorer,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai._thinking_part import render_replayed_thinking, split_content_into_text_and_thinking
from pydantic_ai._utils import guard_tool_call_id, is_text_like_media_type, now_utc, number_to_datetime
from pydantic_ai.models import (
    _customize_tool_def as customize_tool_def,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai.models import (
    _sendable_request_parts as sendable_request_parts,  # pyright: ignore[reportPrivateUsage]
)
from pydantic_ai.models._tool_choice import resolve_tool_choice, support_tool_forcing, tool_forcing_unavailable_reason
from pydantic_ai.profiles._family import vendor_family_model_profile
from pydantic_ai.profiles._special_tokens import special_token_route_profile

__all__ = [
    "DEFAULT_OUTPUT_TOOL_NAME",
    "KNOWN_DOCUMENT_MEDIA_TYPES",
    "MODEL_MEMBERS",
    "STREAMED_RESPONSE_MEMBERS",
    "TEXT_DOCUMENT_MEDIA_TYPES",
    "FileInputKind",
    "JsonSchemaTransformer",
    "StreamedTextRestorer",
    "customize_tool_def",
    "guard_tool_call_id",
    "is_text_like_media_type",
    "model_errors",
    "now_utc",
    "number_to_datetime",
    "render_replayed_thinking",
    "resolve_tool_choice",
    "sendable_request_parts",
    "special_token_route_profile",
    "split_content_into_text_and_thinking",
    "support_tool_forcing",
    "tool_forcing_unavailable_reason",
    "vendor_family_model_profile",
]

MODEL_ERRORS_USED: tuple[str, ...] = ("openai_compatible_category", "stream_error", "connection_error")
"""The functions of `pydantic_ai._model_errors` that `llm.wire` calls."""

MODEL_MEMBERS: tuple[str, ...] = (
    # Overridden by `LeanOpenAIModel`: a renamed hook would leave the override silently unused.
    "_unsupported_file_inputs",
    "_relocates_tool_files",
    "_provider_model_profile",
    "_instance_profile_defaults",
    "_unsupported_settings",
    "_request_thinks",
    "_settings_overriding_thinking",
    "_overrides_unified_effort",
    "_carries_thinking_in_user_turn",
    # Called by it.
    "_get_instruction_parts",
    "_format_inlined_text_file",
    "_validate_uploaded_file_provider",
    "_canonical_system_stamp",
)
"""Private members of `pydantic_ai.models.Model` the lean model overrides or calls."""

STREAMED_RESPONSE_MEMBERS: tuple[str, ...] = ("_get_event_iterator", "_parts_manager", "_add_usage", "_usage_received")
"""Private members of `pydantic_ai.models.StreamedResponse` the lean streamed response overrides or uses."""
