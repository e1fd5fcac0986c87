"""An agent's tool approval policy: which calls run, which ask a person first, which never run.

A policy is a list of rules. A rule names one tool (its registry key, as hook matchers do) or one
group, a decision (`allow`, `ask` or `deny`) and optionally `unless`: argument conditions under
which the rule does not apply (each named argument a string fully matching its regular
expression, e.g. ask before `mastra_workspace_execute_command` unless `command` matches an
allow-list). Of the rules that apply to a call the strictest decides (deny, then ask, then allow,
as Claude Code's permission rules do); no rule applies: the call runs.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from popagent_core.errors import InvalidArgument

# The groups a rule can name. `delegation` is every specialist a supervisor delegates to; its
# members are the turn's agents, so it is resolved per call (`Policy.decide(..., specialists=...)`).
GROUPS: dict[str, frozenset[str]] = {
    "workspace-write": frozenset(
        {
            "mastra_workspace_write_file",
            "mastra_workspace_edit_file",
            "mastra_workspace_mkdir",
            "mastra_workspace_delete",
        }
    ),
    "shell": frozenset(
        {
            "mastra_workspace_execute_command",
            "mastra_workspace_get_process_output",
            "mastra_workspace_kill_process",
        }
    ),
    "browser": frozenset({"bifrostNavigator", "useBrowserSecret"}),
    "secrets": frozenset({"useBrowserSecret"}),
    "delegation": frozenset(),
}
MAX_RULES = 100
MAX_PATTERN_CHARS = 500
# A pattern that has not matched in this time counts as not matching, so its rule applies.
MATCH_TIMEOUT_S = 0.05


class Decision(enum.IntEnum):
    """Ordered by strictness: of several rules that apply, the highest wins."""

    ALLOW = 0
    ASK = 1
    DENY = 2

    @property
    def word(self) -> str:
        return self.name.lower()


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str | None = Field(default=None, min_length=1, max_length=200)
    group: Literal["workspace-write", "shell", "browser", "secrets", "delegation"] | None = None
    decision: Literal["allow", "ask", "deny"]
    # Argument name -> regular expression the argument must match in full for the rule NOT to apply.
    unless: dict[str, str] = Field(default_factory=dict, max_length=20)

    @model_validator(mode="after")
    def _one_target(self) -> Rule:
        if (self.tool is None) == (self.group is None):
            raise ValueError("a rule names exactly one of tool or group")
        return self

    @field_validator("unless")
    @classmethod
    def _patterns_compile(cls, unless: dict[str, str]) -> dict[str, str]:
        for name, pattern in unless.items():
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"the pattern for {name!r} is longer than {MAX_PATTERN_CHARS} characters")
            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise ValueError(f"the pattern for {name!r} is not a regular expression: {exc}") from None
        return unless

    def names(self, tool_name: str, specialists: Collection[str]) -> bool:
        if self.tool is not None:
            return self.tool == tool_name
        if self.group == "delegation":
            return tool_name in specialists
        return tool_name in GROUPS[self.group or ""]

    def excepted(self, arguments: Mapping[str, Any]) -> bool:
        """The call meets every `unless` condition, so this rule does not apply to it."""
        if not self.unless:
            return False
        return all(_full_match(pattern, arguments.get(name)) for name, pattern in self.unless.items())

    @property
    def label(self) -> str:
        target = f"tool {self.tool}" if self.tool is not None else f"group {self.group}"
        return f"the {self.decision} rule for {target}"


def _full_match(pattern: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return regex.fullmatch(pattern, value, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        return False


_RULES = TypeAdapter(list[Rule])


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    # The rule that decided (empty when none applied).
    reason: str = ""


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, document: Any) -> Policy:
        """A policy from its JSON form (a list of rules); InvalidArgument names what is wrong."""
        if not isinstance(document, list):
            raise InvalidArgument("toolApproval must be a JSON array of rules")
        if len(document) > MAX_RULES:
            raise InvalidArgument(f"toolApproval has more than {MAX_RULES} rules")
        try:
            return cls(tuple(_RULES.validate_python(document)))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise InvalidArgument(f"toolApproval[{where}]: {error['msg']}") from None

    def to_json(self) -> list[dict[str, Any]]:
        return [
            rule.model_dump(exclude_none=True, exclude_defaults=True) | {"decision": rule.decision}
            for rule in self.rules
        ]

    def decide(self, tool_name: str, arguments: Mapping[str, Any], *, specialists: Collection[str] = ()) -> Verdict:
        verdict = Verdict(Decision.ALLOW)
        for rule in self.rules:
            if not rule.names(tool_name, specialists) or rule.excepted(arguments):
                continue
            decision = Decision[rule.decision.upper()]
            if decision > verdict.decision:
                verdict = Verdict(decision, f"{rule.label} in the agent's approval policy")
        return verdict
