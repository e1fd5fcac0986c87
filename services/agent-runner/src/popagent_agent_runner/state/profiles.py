"""The persisted agent profiles and runtime settings as one turn reads them, unchanged for the turn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from popagent_agent_runner.approvals.policy import Policy
from popagent_core.db import record_of


@dataclass(frozen=True)
class RuntimeSnapshot:
    """One read of popagent_agent_runtime_settings, used unchanged for the whole turn."""

    default_model: str
    supervisor_max_steps: int
    specialist_max_steps: int
    max_concurrent_tool_calls: int
    max_processor_retries: int
    final_response_feedback: str
    delegation_context_max_chars: int
    delegation_result_max_chars: int
    delegation_failure_text: str
    delegation_truncation_text: str
    # The workspace shell's timeout of a command that names none.
    command_timeout_ms: int
    # A chat turn runs on to its end when its client goes away.
    continue_on_disconnect: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RuntimeSnapshot:
        return record_of(cls, row)


@dataclass(frozen=True)
class RunSkill:
    """One Agent Skill as a run sees it: enabled, resolved for this agent (`tools/skills/`)."""

    name: str
    description: str
    instructions: str
    # Relative path -> text, read one at a time with `skill_read`.
    references: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunSkill:
        return record_of(cls, row, references=tuple(sorted(row["references"].items())))


@dataclass(frozen=True)
class AgentProfile:
    """One persisted agent (popagent_agents), as this turn read it."""

    id: str
    display_name: str
    description: str
    instructions: str
    delegation_eligible: bool
    tools: tuple[str, ...]
    # None: the request-selected or default route.
    model: str | None
    # Which workspace tools it gets: none, read-only or read-write (decided here, never by a prompt).
    workspace_access: str = "none"
    # Which browser operations it may run: none, read-only or interactive (enforced by browser-bridge).
    browser_access: str = "none"
    # The agent's enabled skills, by name; the skill tools exist for it only when there is one.
    skills: tuple[RunSkill, ...] = ()
    # Which of its tool calls run, ask a person first, or never run (approvals/policy.py).
    tool_approval: Policy = field(default_factory=Policy)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AgentProfile:
        return record_of(
            cls,
            row,
            tool_approval=Policy.parse(row.get("tool_approval") or []),
            tools=tuple(row["tools"]),
            browser_access=row.get("browser_access", "none"),
            skills=tuple(RunSkill.from_row(skill) for skill in row.get("skills") or ()),
        )
