"""One turn of the popagent supervisor, from the newest user message to a stored answer.

    prepared = await runner.prepare(TurnInput(...))   # NotFound here, before any event
    await runner.run(prepared, output)                # events go to `output` as they happen

The order of a turn (hook timing from AGENTS_HOOKS.md):
1. `start` event; `SessionStart` the first time this process sees the session (`SessionStarts`:
   its creation here fired it already);
2. `UserPromptSubmit` before recall and the model: `deny` ends the turn with the reason,
   `modify` replaces the prompt's text (attachments stay);
3. recall: the long-term memories most relevant to the prompt, injected as instructions;
4. the supervisor runs on the thread's history, streaming text straight to the output
   (the lean model's sink) while steps, tools and delegations arrive as events;
5. `Stop` after a complete response: `continue` re-runs with the hook's reason, at most
   `maxProcessorRetries` times; a `continue` after that blocks completion;
6. the user and assistant messages, any specialist threads and the `TurnCompleted`
   evidence are stored in one transaction, then `finish`.
A provider, stream or framework failure fires `StopFailure`, ends the stream with an
`error` event and stores nothing but the failure evidence. Cancellation (the client went
away) stops everything and stores nothing.

`run` takes a prepared turn and an output and says how the turn ended (`TurnEnd`), so a
background task attempt is a second thin entry point over the same turn (its own ids, no
`SessionStart`, the ending mapped onto the task's outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.exceptions import ModelHTTPError, UsageLimitExceeded
from pydantic_ai.messages import (
    AgentStreamEvent,
    BinaryContent,
    DocumentUrl,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage, UsageLimits

from popagent.events.v1 import events_pb2
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.model import ModelFailure, classify_model_error, streaming_to
from popagent_agent_runner.sessions import SessionStarts
from popagent_agent_runner.turn.agent_runs import ToolEvents, run_agent
from popagent_agent_runner.turn.agents_factory import AgentFactory
from popagent_agent_runner.turn.capability import arguments_object, jsonable
from popagent_agent_runner.turn.deps import SUPERVISOR_ID, TurnContext, TurnDeps
from popagent_agent_runner.turn.events import TurnOutput
from popagent_agent_runner.turn.hooks_points import TurnHooks, bounded, denied
from popagent_agent_runner.turn.memories import RECALL_LIMIT, MemoryStore, bounded_recall, recall_query
from popagent_agent_runner.turn.thread_store import ThreadStore, TurnState
from popagent_core.errors import ConfigurationError, InvalidArgument, PopagentError
from popagent_core.log import trace_id_var, turn_id_var
from popagent_hooks_client.client import HooksClient
from popagent_hooks_client.events import Event, Outcome

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 100_000
# Bounds of the evolution evidence published with every turn.
GOAL_CHARS = 500
EVIDENCE_CHARS = 2000

_SECRETS = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bwhsec_[A-Za-z0-9+/=]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}"),
)
_SECRET_ASSIGNMENT = re.compile(r"(?i)\b(password|passwd|secret|token|api[_-]?key)(\s*[:=]\s*)(\S+)")


def redact_secrets(text: str) -> str:
    """Evidence text with anything that looks like a credential replaced by `[redacted]`."""
    for pattern in _SECRETS:
        text = pattern.sub("[redacted]", text)
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)


def evidence(text: str, limit: int) -> str:
    return bounded(redact_secrets(text), limit)


@dataclass(frozen=True)
class TurnInput:
    session_id: str
    # The newest user message (AI SDK UI message JSON object).
    message: dict[str, Any]
    # Empty: the persisted default model.
    model: str = ""
    # Empty: the session's workspace.
    workspace_id: str = ""
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    session_start: bool = True


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended; a cancelled turn raises `CancelledError` instead.

    - `answered`: the assistant's response is stored and the stream finished;
    - `prompt_denied`: `UserPromptSubmit` denied the prompt (`message` is the hook's reason); the
      stream finished with the refusal, nothing was stored;
    - `failed`: the stream ended with an `error` event of `error_class` saying `message`.
    """

    outcome: Literal["answered", "prompt_denied", "failed"]
    error_class: TurnFailure | None = None
    message: str = ""


ANSWERED = TurnEnd("answered")


@dataclass(frozen=True)
class PreparedTurn:
    input: TurnInput
    state: TurnState
    message_id: str
    route: str


def parse_user_message(message_json: str) -> dict[str, Any]:
    """The newest UI message, checked to be a user message with at least one part."""
    try:
        message = orjson.loads(message_json)
    except orjson.JSONDecodeError:
        raise InvalidArgument("message must be a JSON UI message") from None
    if not isinstance(message, dict) or message.get("role") != "user":
        raise InvalidArgument("message must be a user UI message")
    if not isinstance(message.get("id"), str) or not 1 <= len(message["id"]) <= 128:
        raise InvalidArgument("message id must be 1 to 128 characters")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise InvalidArgument("message must have parts")
    return message


def prompt_text(message: dict[str, Any]) -> str:
    return "\n".join(p["text"] for p in message["parts"] if p.get("type") == "text" and isinstance(p.get("text"), str))


def with_prompt_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """Every text part collapsed into one replacement, where the first was; other parts kept."""
    parts: list[dict[str, Any]] = []
    replaced = False
    for part in message["parts"]:
        if part.get("type") == "text":
            if not replaced:
                parts.append({"type": "text", "text": text})
                replaced = True
            continue
        parts.append(part)
    if not replaced:
        parts.insert(0, {"type": "text", "text": text})
    return {**message, "parts": parts}


def user_content(message: dict[str, Any]) -> str | list[UserContent]:
    """The model-side prompt: text parts and file attachments (data URLs or http(s) URLs).

    Text alone is one string, as a model request usually carries it.
    """
    content: list[UserContent] = []
    for part in message["parts"]:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            content.append(part["text"])
        elif kind == "file" and isinstance(part.get("url"), str):
            url: str = part["url"]
            media_type = str(part.get("mediaType") or "")
            if url.startswith("data:"):
                content.append(BinaryContent.from_data_uri(url))
            elif url.startswith(("https://", "http://")):
                content.append(ImageUrl(url=url) if media_type.startswith("image/") else DocumentUrl(url=url))
    if all(isinstance(item, str) for item in content):
        return "\n".join(item for item in content if isinstance(item, str))
    return content


def turn_instructions(recalled: list[str], additional_context: str) -> str | None:
    """Recalled memories and any context a prompt hook added, for this turn's model calls only."""
    sections: list[str] = []
    if recalled:
        listed = "\n".join(f"- {memory}" for memory in recalled)
        sections.append(
            "Long-term memories that may be relevant (recalled from earlier conversations by shared "
            f"words; use them only where they apply):\n{listed}"
        )
    if additional_context:
        sections.append(additional_context)
    return "\n\n".join(sections) or None


class _UISteps:
    """The supervisor's model requests are the assistant message's steps."""

    def __init__(self, output: TurnOutput) -> None:
        self.output = output

    def step_started(self, step: int) -> None:
        self.output.step_start()

    def step_finished(self, step: int, response: ModelResponse) -> None:
        self.output.text_end()


def _ui_tool_events(output: TurnOutput) -> ToolEvents:
    """The supervisor's tool calls and results as they happen (its text comes from the sink)."""

    async def handle(stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            if isinstance(event, FunctionToolCallEvent):
                part = event.part
                output.tool_input(part.tool_call_id, part.tool_name, arguments_object(part.args or {}))
            elif isinstance(event, FunctionToolResultEvent):
                part = event.part
                if part.outcome == "success":
                    output.tool_output(part.tool_call_id, jsonable(part.content))
                else:
                    output.tool_error(part.tool_call_id, part.model_response_str(wrap_if_error=False))

    return handle


def provider_message(error: BaseException, failure: ModelFailure) -> str:
    """The provider's own explanation when its error body has one, else the failure's message."""
    body = error.body if isinstance(error, ModelHTTPError) else None
    if isinstance(body, dict):
        nested = body.get("error")
        for candidate in (body.get("message"), nested.get("message") if isinstance(nested, dict) else nested):
            if isinstance(candidate, str) and candidate:
                return candidate
    return failure.message


def failure_message(failure: ModelFailure, detail: str) -> str:
    """What the user reads when the model provider failed."""
    what = {
        "rate_limit": "The model provider is rate limiting requests",
        "quota": "The model provider's quota is exhausted",
        "overloaded": "The model provider is overloaded",
        "unavailable": "The model provider is unavailable",
        "server_error": "The model provider failed",
        "timeout": "The model provider did not answer in time",
        "request_timeout": "The model provider did not answer in time",
        "connection": "The connection to the model provider broke",
        "authentication": "The model provider refused the credentials",
        "not_found": "The model provider does not know this model",
        "context_window": "The conversation is too long for this model",
        "rejected": "The model provider rejected the request",
        "provider_error": "The model provider reported an error",
        "framework": "The turn failed",
    }.get(failure.error_class, "The turn failed")
    details = [f"HTTP {failure.status_code}"] if failure.status_code else []
    if failure.retry_after is not None:
        details.append(f"retry after {failure.retry_after:g} s")
    suffix = f" ({', '.join(details)})" if details else ""
    return f"{what}{suffix}: {bounded(detail, 500)}"


class TurnRunner:
    def __init__(
        self,
        threads: ThreadStore,
        memories: MemoryStore,
        hooks: HooksClient,
        factory: AgentFactory,
        starts: SessionStarts,
    ) -> None:
        self.threads = threads
        self.memories = memories
        self.hooks = hooks
        self.factory = factory
        self.starts = starts

    async def prepare(self, turn: TurnInput) -> PreparedTurn:
        """Everything the turn needs before its first event; raises NotFound for an unknown session."""
        # Recall rides along with the prelude for the prompt as sent; only a prompt a hook
        # rewrites costs a second query.
        state = await self.threads.prelude(
            turn.session_id, turn.message["id"], recall_query(prompt_text(turn.message)), RECALL_LIMIT
        )
        if turn.workspace_id and turn.workspace_id != state.workspace_id:
            raise InvalidArgument(
                f"workspaceId {turn.workspace_id!r} is not the session's workspace ({state.workspace_id!r})"
            )
        if SUPERVISOR_ID not in state.profiles:
            raise ConfigurationError(f"agent profile {SUPERVISOR_ID!r} is missing")
        if len(prompt_text(turn.message)) > MAX_PROMPT_CHARS:
            raise InvalidArgument(f"the message text must be at most {MAX_PROMPT_CHARS} characters")
        route = turn.model or state.snapshot.default_model
        return PreparedTurn(turn, state, message_id=f"msg-{uuid.uuid4().hex}", route=route)

    async def run(self, prepared: PreparedTurn, output: TurnOutput) -> TurnEnd:
        """Run the turn to its end; every outcome but cancellation ends in `finish` or `error`."""
        turn = prepared.input
        turn_id_var.set(turn.turn_id)
        trace_id_var.set(turn.trace_id)
        output.start(turn.turn_id, prepared.message_id, prepared.route)
        # Let the start go out now: the gateway answers the request as soon as it arrives,
        # while this turn spends the next milliseconds of CPU setting up the model call.
        await asyncio.sleep(0)
        hooks = TurnHooks(self.hooks, turn.session_id, turn.turn_id, prepared.route)
        context = TurnContext(
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            trace_id=turn.trace_id,
            workspace_id=prepared.state.workspace_id,
            route=prepared.route,
            snapshot=prepared.state.snapshot,
            profiles=prepared.state.profiles,
            hooks=hooks,
            memories=self.memories,
            output=output,
        )
        goal = prompt_text(turn.message)
        try:
            return await self._turn(prepared, context, output)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = classify_model_error(exc)
            detail = provider_message(exc, failure)
            # A transport error while a response was arriving is a broken stream too.
            in_stream = failure.in_stream or output.step_has_output
            if failure.error_class is TurnFailure.FRAMEWORK and not isinstance(exc, PopagentError):
                logger.error("turn failed", extra={"session_id": turn.session_id}, exc_info=exc)
            else:
                logger.warning("turn failed", extra={"session_id": turn.session_id, "error_class": failure.error_class})
            await hooks.observe(
                Event.STOP_FAILURE,
                detail={
                    "errorClass": failure.error_class,
                    "statusCode": failure.status_code,
                    "retryAfter": failure.retry_after,
                    "message": bounded(detail, 2000),
                    "inStream": in_stream,
                },
            )
            message = str(exc) if isinstance(exc, PopagentError) else failure_message(failure, detail)
            output.error(failure.error_class, message)
            await self._publish_failure(context, goal, failure.error_class, message)
            return TurnEnd("failed", failure.error_class, message)

    async def _turn(self, prepared: PreparedTurn, context: TurnContext, output: TurnOutput) -> TurnEnd:
        turn = prepared.input
        hooks = context.hooks
        if turn.session_start and self.starts.first_resume(turn.session_id):
            await hooks.observe(Event.SESSION_START, detail={"workspaceId": context.workspace_id, "source": "resume"})

        message = turn.message
        text = prompt_text(message)
        decision = await hooks.gate(
            Event.USER_PROMPT_SUBMIT,
            detail={"prompt": text, "attachments": sum(1 for p in message["parts"] if p.get("type") == "file")},
        )
        if decision.outcome is Outcome.DENY:
            output.say(denied(decision, "This message"))
            output.finish("other", 0, 0)
            await self._publish(context, text, "failure", denied(decision, "The prompt"), TurnFailure.HOOK_DENIED)
            return TurnEnd("prompt_denied", TurnFailure.HOOK_DENIED, decision.reason or "no reason given")
        if decision.outcome is Outcome.MODIFY and decision.prompt is not None:
            message = with_prompt_text(message, decision.prompt)
            text = decision.prompt
            recalled = await self.memories.recall(text)
        else:
            recalled = bounded_recall(prepared.state.recalled)
        instructions = turn_instructions(recalled, decision.additional_context)
        factory = self.factory
        agent = factory.supervisor(context)
        deps = factory.supervisor_deps(context, _UISteps(output))
        snapshot = context.snapshot
        history: list[ModelMessage] = prepared.state.history
        prompt: str | list[UserContent] = user_content(message)
        new_messages: list[ModelMessage] = []
        usage = RunUsage()
        retries = 0
        finish_reason = "stop"
        while True:
            try:
                result = await self._run_supervisor(agent, prompt, history, deps, usage, instructions)
            except UsageLimitExceeded as exc:
                # The final step is reserved for an answer, so this means the model kept calling
                # tools (or answered invalidly) on it: end with a plain account of that. The thread
                # keeps the prompt and that account, not the unfinished tool calls of the run.
                limit_text = (
                    "I stopped before finishing: this turn reached its limit of "
                    f"{snapshot.supervisor_max_steps} model steps ({exc}). Ask me to continue if you want more."
                )
                output.say(limit_text)
                new_messages.append(ModelRequest(parts=[UserPromptPart(content=prompt)]))
                new_messages.append(ModelResponse(parts=[TextPart(content=limit_text)]))
                finish_reason = "length"
                break
            new_messages.extend(result.new_messages())
            history = result.all_messages()
            decision = await hooks.gate(
                Event.STOP,
                detail={
                    "response": bounded(result.output),
                    "retry": retries,
                    "maxRetries": snapshot.max_processor_retries,
                },
            )
            if decision.outcome is not Outcome.CONTINUE:
                break
            if retries >= snapshot.max_processor_retries:
                reason = decision.reason or "no reason given"
                message_text = (
                    f"A Stop hook kept this turn from completing after {retries} "
                    f"{'retry' if retries == 1 else 'retries'}: {reason}"
                )
                output.error(TurnFailure.STOP_BLOCKED, message_text)
                await self._publish(context, text, "failure", message_text, TurnFailure.STOP_BLOCKED)
                return TurnEnd("failed", TurnFailure.STOP_BLOCKED, message_text)
            retries += 1
            prompt = decision.reason or "Continue: your answer is not complete yet."
            if decision.additional_context:
                prompt = f"{prompt}\n\n{decision.additional_context}"

        usage.incr(context.specialist_usage)
        output.metadata["usage"] = {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens}
        assistant_ui = output.ui_message()
        answer = output.text()
        outcome = self._outcome(context, text, "outcome", answer or "(no text)", "")
        await self.threads.commit_turn(
            session_id=context.session_id,
            base=prepared.state,
            user_ui=message,
            assistant_ui=assistant_ui,
            messages=new_messages,
            specialist_runs=context.specialist_runs,
            outcome=outcome,
        )
        output.finish(finish_reason, usage.input_tokens, usage.output_tokens)
        return ANSWERED

    async def _run_supervisor(
        self,
        agent: Agent[TurnDeps, str],
        prompt: str | list[UserContent],
        history: list[ModelMessage],
        deps: TurnDeps,
        usage: RunUsage,
        instructions: str | None,
    ) -> AgentRunResult[str]:
        # A fresh step budget per run: the final step of each is reserved for an answer.
        with streaming_to(deps.turn.output):
            return await run_agent(
                agent,
                prompt,
                tool_events=_ui_tool_events(deps.turn.output),
                message_history=history,
                deps=deps,
                usage=usage,
                usage_limits=UsageLimits(request_limit=usage.requests + deps.max_steps),
                instructions=instructions,
            )

    def _outcome(
        self, context: TurnContext, goal: str, kind: str, text: str, failure_class: str
    ) -> events_pb2.TurnCompleted:
        return events_pb2.TurnCompleted(
            turn_id=context.turn_id,
            trace_id=context.trace_id,
            session_id=context.session_id,
            agent_id=SUPERVISOR_ID,
            kind=kind,
            goal=evidence(goal, GOAL_CHARS),
            evidence=evidence(text, EVIDENCE_CHARS),
            failure_class=failure_class,
        )

    async def _publish(self, context: TurnContext, goal: str, kind: str, text: str, failure_class: str) -> None:
        await self.threads.publish_outcome(self._outcome(context, goal, kind, text, failure_class))

    async def _publish_failure(self, context: TurnContext, goal: str, failure_class: str, text: str) -> None:
        # Evidence of a failure is best effort: the turn already failed and said so.
        with contextlib.suppress(PopagentError):
            await self._publish(context, goal, "failure", text, failure_class)
