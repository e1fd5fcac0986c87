"""Delegation: one supervisor tool per delegation-eligible specialist, running it on an isolated thread.

The tool hands the specialist a brief plus a bounded slice of the supervisor's
conversation (`delegationContextMaxChars`), runs it with its own step ceiling, and
returns only the specialist's final text, cut to `delegationResultMaxChars` with the
persisted truncation notice. Nested tool calls, tool payloads and run metadata stay out
of the supervisor's context; they show up only as `data-agentActivity` telemetry. A
failed delegation returns the persisted failure feedback instead, so the supervisor
can recover. Specialists get no delegation tools: they never delegate to each other.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterable, Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic_ai import Agent, RunContext, Tool, ToolFailed
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage, UsageLimits

from popagent_agent_runner.context.deps import SUPERVISOR_ID, TurnContext, TurnDeps
from popagent_agent_runner.context.events import TurnOutput
from popagent_agent_runner.context.hooks import bounded, denied
from popagent_agent_runner.llm.model import DROP_TEXT, classify_model_error, is_estimated, streaming_to
from popagent_agent_runner.memory.threads import SpecialistRun
from popagent_agent_runner.state.profiles import AgentProfile
from popagent_agent_runner.turn.agent_runs import agent_run_span, run_agent
from popagent_agent_runner.turn.evidence import outcome_event
from popagent_core.telemetry import TRACER
from popagent_hooks_client.events import Event, Outcome

logger = logging.getLogger(__name__)

MAX_BRIEF_CHARS = 20_000
# Delegation tools kept built (profile edits make new ones; the cache restarts when it is full).
MAX_CACHED_TOOLS = 64
# Text of the specialist's reply shown in each iteration's telemetry.
PREVIEW_CHARS = 200

SpecialistBuilder = Callable[[TurnContext, AgentProfile], Agent[TurnDeps, str]]
DepsBuilder = Callable[[TurnContext, AgentProfile, str, "DelegationActivity"], TurnDeps]


def conversation_slice(messages: Sequence[ModelMessage], max_chars: int) -> str:
    """The latest `max_chars` characters of the conversation's user and assistant text."""
    if max_chars <= 0:
        return ""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    content = part.content
                    text = content if isinstance(content, str) else " ".join(c for c in content if isinstance(c, str))
                    if text:
                        lines.append(f"User: {text}")
        elif isinstance(message, ModelResponse):
            text = "".join(part.content for part in message.parts if isinstance(part, TextPart))
            if text:
                lines.append(f"Supervisor: {text}")
    transcript = "\n\n".join(lines)
    return transcript[-max_chars:]


def specialist_prompt(brief: str, context: str) -> str:
    if not context:
        return brief
    return (
        f"{brief}\n\n---\nConversation so far between the user and the supervisor (most recent part, "
        f"possibly cut at the start), for context only:\n{context}"
    )


class DelegationActivity:
    """The `data-agentActivity` part of one delegation, re-sent (same id) as the specialist iterates."""

    def __init__(
        self, *, output: TurnOutput, activity_id: str, profile: AgentProfile, thread_id: str, model: str
    ) -> None:
        self.output = output
        self.activity_id = activity_id
        self.started = time.monotonic()
        self.iterations: list[dict[str, Any]] = []
        self.data: dict[str, Any] = {
            "agentId": profile.id,
            "agentName": profile.display_name,
            "threadId": thread_id,
            "model": model,
            "status": "running",
            "iterations": self.iterations,
        }

    def emit(self) -> None:
        self.output.activity(self.activity_id, {**self.data, "iterations": [dict(i) for i in self.iterations]})

    # StepObserver: one iteration per model request of the specialist.
    def step_started(self, step: int) -> None:
        self.iterations.append({"step": step, "toolCalls": []})

    def step_finished(self, step: int, response: ModelResponse) -> None:
        if not self.iterations or self.iterations[-1]["step"] != step:
            self.step_started(step)
        iteration = self.iterations[-1]
        text = response.text or ""
        iteration["textChars"] = len(text)
        if text:
            iteration["preview"] = text[:PREVIEW_CHARS]
        iteration["toolCalls"] = [part.tool_name for part in response.tool_calls]
        self.emit()

    async def tool_events(self, stream: AsyncIterable[AgentStreamEvent]) -> None:
        """Counts the outcomes of the specialist's tool calls."""
        async for event in stream:
            if isinstance(event, FunctionToolResultEvent) and self.iterations:
                outcomes = self.iterations[-1].setdefault("toolResults", {})
                outcomes[event.part.outcome] = outcomes.get(event.part.outcome, 0) + 1

    def finish(self, status: str, **fields: Any) -> None:
        self.data["status"] = status
        self.data["durationMs"] = int((time.monotonic() - self.started) * 1000)
        self.data.update(fields)
        self.emit()


class Delegation:
    """Builds the delegation tools of one turn's supervisor."""

    def __init__(self, build_agent: SpecialistBuilder, build_deps: DepsBuilder) -> None:
        self.build_agent = build_agent
        self.build_deps = build_deps
        # A tool's schema costs milliseconds to build and depends only on what the model reads.
        self._tools: dict[tuple[str, str, str], Tool[TurnDeps]] = {}

    def tools(self, turn: TurnContext) -> list[Tool[TurnDeps]]:
        tools: list[Tool[TurnDeps]] = []
        for profile in turn.profiles.values():
            if not profile.delegation_eligible or profile.id == SUPERVISOR_ID:
                continue
            key = (profile.id, profile.display_name, profile.description)
            tool = self._tools.get(key)
            if tool is None:
                if len(self._tools) > MAX_CACHED_TOOLS:
                    self._tools.clear()
                tool = self._tools[key] = self._tool(profile)
            tools.append(tool)
        return tools

    def _tool(self, profile: AgentProfile) -> Tool[TurnDeps]:
        async def delegate(
            ctx: RunContext[TurnDeps],
            brief: Annotated[
                str,
                Field(
                    min_length=1,
                    max_length=MAX_BRIEF_CHARS,
                    description="a complete brief: goal, relevant files or URLs, what is known, "
                    "constraints, and the exact form of the answer you need back",
                ),
            ],
        ) -> str:
            return await self.run(ctx, profile.id, brief)

        return Tool(
            delegate,
            name=profile.id,
            description=f"Delegate one focused task to the {profile.display_name} specialist. {profile.description}",
        )

    async def run(self, ctx: RunContext[TurnDeps], agent_id: str, brief: str) -> str:
        with TRACER.start_as_current_span(
            "delegation", attributes={"gen_ai.agent.id": agent_id, "gen_ai.tool.call.id": ctx.tool_call_id or ""}
        ):
            return await self._delegate(ctx, agent_id, brief)

    async def _delegate(self, ctx: RunContext[TurnDeps], agent_id: str, brief: str) -> str:
        turn = ctx.deps.turn
        if not ctx.deps.is_supervisor:
            # Never offered to specialists; refused anyway should a history replay ask for it.
            raise ToolFailed("Specialists do not delegate; answer with your own work.")
        profile = turn.profiles[agent_id]
        snapshot = turn.snapshot
        thread_id = f"specialist-{uuid.uuid4().hex}"
        model = turn.model_for(profile)
        activity = DelegationActivity(
            output=turn.output,
            activity_id=f"delegation-{ctx.tool_call_id}",
            profile=profile,
            thread_id=thread_id,
            model=model,
        )
        activity.emit()

        decision = await turn.hooks.gate(
            Event.SUBAGENT_START, target=agent_id, tool_call_id=ctx.tool_call_id or "", detail={"prompt": brief}
        )
        if decision.outcome is Outcome.DENY:
            if turn.containment is not None:
                turn.containment.delegated(agent_id, "denied")
            activity.finish("denied", reason=decision.reason)
            raise ToolFailed(denied(decision, f"Delegation to {agent_id}"))
        if decision.outcome is Outcome.MODIFY and decision.prompt is not None:
            brief = decision.prompt
        prompt = specialist_prompt(brief, conversation_slice(ctx.messages, snapshot.delegation_context_max_chars))

        agent = self.build_agent(turn, profile)
        deps = self.build_deps(turn, profile, thread_id, activity)
        usage = RunUsage()
        instructions = decision.additional_context or None
        try:
            # The specialist's text must not stream as the supervisor's: it is telemetry. Its requests
            # stream all the same, for the upstream's real usage (see `DROP_TEXT`).
            with streaming_to(DROP_TEXT), agent_run_span(agent_id, turn.session_id, thread_id, model):
                result = await run_agent(
                    agent,
                    prompt,
                    tool_events=activity.tool_events,
                    deps=deps,
                    usage=usage,
                    usage_limits=UsageLimits(request_limit=snapshot.specialist_max_steps),
                    instructions=instructions,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = classify_model_error(exc)
            logger.warning(
                "delegation failed", extra={"agent": agent_id, "error_class": failure.error_class, "error": str(exc)}
            )
            if turn.containment is not None:
                turn.containment.delegated(agent_id, "failed")
            activity.finish("failed", errorClass=failure.error_class, error=bounded(failure.message, 500))
            _record_outcome(turn, agent_id, brief, "failure", failure.message, failure.error_class)
            await turn.hooks.observe(
                Event.SUBAGENT_STOP,
                target=agent_id,
                tool_call_id=ctx.tool_call_id or "",
                detail={"status": "failed", "errorClass": failure.error_class, "response": ""},
            )
            raise ToolFailed(f"{snapshot.delegation_failure_text}\n({agent_id}: {failure.message})") from None
        finally:
            turn.specialist_usage.incr(usage)

        turn.specialist_runs.append(SpecialistRun(thread_id, agent_id, result.all_messages()))
        if turn.containment is not None:
            turn.containment.delegated(agent_id, "completed")
        _record_outcome(turn, agent_id, brief, "outcome", result.output or "(no text)")
        text = result.output
        truncated = len(text) > snapshot.delegation_result_max_chars
        if truncated:
            text = f"{text[: snapshot.delegation_result_max_chars]}\n\n{snapshot.delegation_truncation_text}"
        activity.finish(
            "completed",
            resultChars=len(result.output),
            truncated=truncated,
            usage={
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "requests": usage.requests,
                **({"estimated": True} if is_estimated(usage) else {}),
            },
        )
        await turn.hooks.observe(
            Event.SUBAGENT_STOP,
            target=agent_id,
            tool_call_id=ctx.tool_call_id or "",
            detail={"status": "completed", "response": bounded(text), "truncated": truncated},
        )
        return text


def _record_outcome(
    turn: TurnContext,
    agent_id: str,
    brief: str,
    kind: Literal["outcome", "failure"],
    text: str,
    failure_class: str = "",
) -> None:
    """The delegation's own outcome, published with the turn's: learning reaches the specialist it ran."""
    turn.specialist_outcomes.append(
        outcome_event(
            turn,
            agent_id=agent_id,
            kind=kind,
            goal=brief,
            text=text,
            failure_class=failure_class,
        )
    )
