"""Ranges and cross-field rules of the agent-runtime and memory settings singletons.

The gateway's wire DTOs repeat the per-field bounds for the OpenAPI document (a test
checks both agree); this module is the owner's check, applied to the merged row inside
the update transaction, so concurrent partial updates can never combine into a row
that breaks a cross-field rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Violation:
    column: str
    message: str

    @property
    def field(self) -> str:
        """The wire (camelCase) name the client sent."""
        return to_camel(self.column)


@dataclass(frozen=True)
class IntRange:
    lo: int
    hi: int

    def check(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if not self.lo <= value <= self.hi:
            return f"must be between {self.lo} and {self.hi}"
        return None


@dataclass(frozen=True)
class FloatRange:
    lo: float
    hi: float

    def check(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number"
        if not self.lo <= value <= self.hi:
            return f"must be between {self.lo} and {self.hi}"
        return None


@dataclass(frozen=True)
class Text:
    min_length: int
    max_length: int

    def check(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if not self.min_length <= len(value) <= self.max_length:
            return f"must be {self.min_length} to {self.max_length} characters"
        if "\x00" in value:
            return "must not contain NUL characters"
        return None


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]

    def check(self, value: Any) -> str | None:
        if value not in self.values:
            return f"must be one of {', '.join(self.values)}"
        return None


@dataclass(frozen=True)
class Flag:
    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "must be a boolean"


Spec = IntRange | FloatRange | Text | Choice | Flag
CrossRule = Callable[[Mapping[str, Any]], Violation | None]


@dataclass(frozen=True)
class SettingsRules:
    fields: Mapping[str, Spec]
    cross: tuple[CrossRule, ...]

    def violations(self, row: Mapping[str, Any]) -> list[Violation]:
        found = [
            Violation(column, message) for column, spec in self.fields.items() if (message := spec.check(row[column]))
        ]
        if found:
            # Cross-field rules compare values that must first be individually valid.
            return found
        return [violation for rule in self.cross if (violation := rule(row)) is not None]


def _greater(column: str, other: str) -> CrossRule:
    def rule(row: Mapping[str, Any]) -> Violation | None:
        if row[column] <= row[other]:
            return Violation(column, f"must be greater than {to_camel(other)} ({row[other]})")
        return None

    return rule


def _at_least(column: str, other: str) -> CrossRule:
    def rule(row: Mapping[str, Any]) -> Violation | None:
        if row[column] < row[other]:
            return Violation(column, f"must be at least {to_camel(other)} ({row[other]})")
        return None

    return rule


def _shared_budget_disables_async(row: Mapping[str, Any]) -> Violation | None:
    if row["shared_budget"] and (row["async_observation_enabled"] or row["async_reflection_enabled"]):
        return Violation(
            "shared_budget",
            "shared budgets disable async buffering: set asyncObservationEnabled and asyncReflectionEnabled to false",
        )
    return None


MAX_TEXT = 4000
MAX_GUIDANCE = 8000

AGENT_RUNTIME = SettingsRules(
    fields={
        "default_model": Text(1, 200),
        # The final step is reserved for the response, so the supervisor needs at least two.
        "supervisor_max_steps": IntRange(2, 200),
        "specialist_max_steps": IntRange(1, 200),
        "max_concurrent_tool_calls": IntRange(1, 32),
        "max_processor_retries": IntRange(0, 10),
        "final_response_feedback": Text(1, MAX_TEXT),
        "delegation_context_max_chars": IntRange(0, 500_000),
        "delegation_result_max_chars": IntRange(256, 500_000),
        "delegation_failure_text": Text(1, MAX_TEXT),
        "delegation_truncation_text": Text(1, MAX_TEXT),
        "task_concurrency": IntRange(1, 64),
        "task_poll_interval_ms": IntRange(100, 600_000),
        "task_heartbeat_interval_ms": IntRange(100, 600_000),
        "task_heartbeat_timeout_ms": IntRange(1_000, 3_600_000),
        "task_attempt_timeout_ms": IntRange(1_000, 86_400_000),
        "task_abort_ack_timeout_ms": IntRange(100, 600_000),
        "task_retry_base_ms": IntRange(100, 3_600_000),
        "task_retry_cap_ms": IntRange(100, 86_400_000),
        # The workspace shell's timeout for a command that names none (at most 600 s).
        "command_timeout_ms": IntRange(1_000, 600_000),
        # A chat turn runs on to its end when its client goes away.
        "continue_on_disconnect": Flag(),
    },
    cross=(
        # A heartbeat must be able to arrive before the worker is declared dead.
        _greater("task_heartbeat_timeout_ms", "task_heartbeat_interval_ms"),
        _greater("task_attempt_timeout_ms", "task_heartbeat_interval_ms"),
        _at_least("task_retry_cap_ms", "task_retry_base_ms"),
    ),
)

MEMORY = SettingsRules(
    fields={
        "enabled": Flag(),
        "observation_message_tokens": IntRange(1_000, 1_000_000),
        "reflection_observation_tokens": IntRange(1_000, 1_000_000),
        "raw_history_retention_messages": IntRange(0, 1_000),
        "async_observation_enabled": Flag(),
        # Fraction of the threshold at which background buffering starts.
        "observation_buffer_activation": FloatRange(0.05, 0.95),
        # Multiple of the threshold at which a turn waits for synchronous observation.
        "observation_block_after": FloatRange(1.0, 4.0),
        "async_reflection_enabled": Flag(),
        "reflection_buffer_activation": FloatRange(0.05, 0.95),
        "reflection_block_after": FloatRange(1.0, 4.0),
        # 0 disables idle activation.
        "idle_activation_seconds": IntRange(0, 86_400),
        "activate_on_provider_change": Flag(),
        "shared_budget": Flag(),
        "previous_observation_max_tokens": IntRange(0, 100_000),
        "temporal_markers": Flag(),
        "forward_attachments": Flag(),
        "retrieval_scope": Choice(("thread", "resource")),
        "observer_instructions": Text(0, MAX_GUIDANCE),
        "reflector_instructions": Text(0, MAX_GUIDANCE),
    },
    cross=(_shared_budget_disables_async,),
)
