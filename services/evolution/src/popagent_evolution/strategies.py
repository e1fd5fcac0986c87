"""The closed set of learning strategies: what reflection may choose, and the text each one writes.

Reflection selects strategies by name, cites the signals that justify them and may add a
one-sentence lesson in its own words; it never writes prompt or skill text. Every strategy
is a code-owned template that writes one of two things only: a section of the agent's
learned overlay (composed after its user-managed instructions), or one evolution-managed
learned skill. A template names its cases by failure class and count and carries the
lesson; it never quotes a signal's goal or evidence, which are whatever the turn read (a
user, a web page, a tool's output) and would otherwise reach every later turn's
instructions. Nothing here can name a tool, an access level, a secret, a hook,
authentication or an execution bound: those are data no strategy writes.

| strategy | writes | when it helps |
|---|---|---|
| `verify_before_answering` | overlay | answers refused or blocked because they claimed more than the evidence showed |
| `tool_failure_checklist` | overlay | the same tool or step failing again; a checklist before retrying |
| `context_budget` | overlay | `context_window` failures: read less, summarize, work in ranges |
| `hook_policy_alignment` | overlay | `hook_denied`: restate the request inside the policy instead of retrying it |
| `completion_criteria` | overlay | `stop_blocked`: check what "finished" means before ending the turn |
| `deadline_pacing` | overlay | `deadline`: plan in small steps and deliver partial results early |
| `clarify_first` | overlay | a goal too vague to act on: one precise question before working |
| `troubleshooting_skill` | learned skill | a recurring failure class: a `troubleshoot-<class>` skill with the steps and the cases seen |
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from popagent_core.secret_text import redact_secrets

# Bounds of what reflection's lesson may be, and of what a strategy writes.
MAX_LESSON_CHARS = 200
MAX_SECTION_CHARS = 2500
MAX_SKILL_CHARS = 6000


class Strategy(enum.StrEnum):
    VERIFY_BEFORE_ANSWERING = "verify_before_answering"
    TOOL_FAILURE_CHECKLIST = "tool_failure_checklist"
    CONTEXT_BUDGET = "context_budget"
    HOOK_POLICY_ALIGNMENT = "hook_policy_alignment"
    COMPLETION_CRITERIA = "completion_criteria"
    DEADLINE_PACING = "deadline_pacing"
    CLARIFY_FIRST = "clarify_first"
    TROUBLESHOOTING_SKILL = "troubleshooting_skill"


SKILL_STRATEGIES = frozenset({Strategy.TROUBLESHOOTING_SKILL})


@dataclass(frozen=True)
class LearnedSkillText:
    name: str
    description: str
    instructions: str


def clip(text: str, limit: int) -> str:
    text = " ".join(redact_secrets(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def readable(failure_class: str) -> str:
    return failure_class.replace("_", " ")


def provenance(failure_classes: Sequence[str], lesson: str) -> str:
    """What a template says about the cases it was learned from: how many, of which classes, and
    the reflection's lesson on one line; never their text."""
    count = len(failure_classes)
    classes = ", ".join(readable(c) for c in sorted(set(failure_classes)))
    said = f"Learned from {count} failed turn{'' if count == 1 else 's'} ({classes})."
    lesson = " ".join(lesson.split())[:MAX_LESSON_CHARS]
    return f"{said}\nPattern noted in review: {lesson}" if lesson else said


_OVERLAY_TEXT: dict[Strategy, tuple[str, str]] = {
    Strategy.VERIFY_BEFORE_ANSWERING: (
        "Verify before answering",
        "Before your final answer, check every claim that something was run, changed or found against a tool "
        "result or specialist report of this turn; remove or qualify any claim without one, and say what was not "
        "verified.",
    ),
    Strategy.TOOL_FAILURE_CHECKLIST: (
        "When a step fails",
        "When a tool call or step fails: read the whole error, decide whether the input, the environment or the "
        "approach is at fault, change something before trying again, and never repeat an identical failing call. "
        "After two failed attempts, report what failed and what you tried.",
    ),
    Strategy.CONTEXT_BUDGET: (
        "Keep the context small",
        "Read only what the task needs: search before reading, read line ranges of large files, summarize long "
        "outputs instead of quoting them, and pass specialists short briefs with the relevant excerpts only.",
    ),
    Strategy.HOOK_POLICY_ALIGNMENT: (
        "Work within the configured policies",
        "When a request was refused by a configured policy, do not resend it unchanged: say what was refused, "
        "offer the closest request the policy allows, and ask the user before going further.",
    ),
    Strategy.COMPLETION_CRITERIA: (
        "Check the completion criteria",
        "Before ending a turn, restate what 'done' means for the request and check each part of it; if something "
        "is missing, finish it or say plainly that it is not done and why.",
    ),
    Strategy.DEADLINE_PACING: (
        "Pace long work",
        "Plan long work as small steps, start with the step that gives the user something usable, report partial "
        "results as you go, and stop starting new work when time is short.",
    ),
    Strategy.CLARIFY_FIRST: (
        "Clarify before acting",
        "When a request can be read in ways that change the result, ask one precise question before working, "
        "and state the assumption you make if you go ahead without an answer.",
    ),
}


def overlay_section(strategy: Strategy, failure_classes: Sequence[str], lesson: str = "") -> str:
    """The overlay section a strategy writes: its guidance, then where it was learned from."""
    title, guidance = _OVERLAY_TEXT[strategy]
    text = f"### {title}\n{guidance}\n{provenance(failure_classes, lesson)}"
    return text[:MAX_SECTION_CHARS]


def skill_name_for(failure_class: str) -> str:
    return "troubleshoot-" + "-".join(part for part in failure_class.lower().replace("_", "-").split("-") if part)


def learned_skill(strategy: Strategy, failure_classes: Sequence[str], lesson: str = "") -> LearnedSkillText:
    """The learned skill a skill strategy writes, named for the cases' (first) failure class."""
    assert strategy in SKILL_STRATEGIES
    failure_class = failure_classes[0]
    kind = readable(failure_class)
    instructions = (
        f"# Troubleshooting: {kind}\n\n"
        f"Turns of this agent ended with a {kind} failure. When a request resembles them:\n\n"
        "1. Before starting, say how you will avoid the failure (smaller steps, less context, a different approach).\n"
        "2. Check intermediate results before building on them.\n"
        "3. If the same failure happens, stop, report what was done and what failed, and suggest a next step.\n\n"
        f"## Cases seen\n{provenance(failure_classes, lesson)}\n"
    )
    return LearnedSkillText(
        name=skill_name_for(failure_class),
        description=f"How to avoid and recover from {kind} failures seen in earlier turns. "
        f"Use it when a request resembles those cases.",
        instructions=instructions[:MAX_SKILL_CHARS],
    )


OVERLAY_HEADING = "## Learned guidance\nThese notes were learned from earlier turns of this agent."


def compose_overlay(sections: dict[str, str]) -> str:
    """The overlay text of an agent's sections, in the strategies' order; empty when none."""
    ordered = [sections[s.value] for s in Strategy if s.value in sections]
    return "\n\n".join([OVERLAY_HEADING, *ordered]) if ordered else ""
