"""One turn of the popagent supervisor, from the newest user message to a stored answer.

    prepared = await runner.prepare(TurnInput(...))   # NotFound here, before any event
    await runner.run(prepared, output)                # events go to `output` as they happen

The order of a turn (hook timing: docs/hooks.md, Events):
1. `start` event; `SessionStart` the first time this process sees the session (`SessionStarts`:
   its creation here fired it already);
2. `UserPromptSubmit` before the relevant memories and the model: `deny` ends the turn with the reason,
   `modify` replaces the prompt's text (attachments stay);
3. relevant memories: the long-term memories most relevant to the prompt, a note for this turn after the history;
4. the supervisor runs on the thread's history, streaming text straight to the output
   (the lean model's sink) while steps, tools and delegations arrive as events;
5. `Stop` after a complete response: `continue` re-runs with the hook's reason, at most
   `maxProcessorRetries` times; a `continue` after that blocks completion;
   (before the first model call the prompt is stored with a placeholder answer marked
   `interrupted`, so a crash from here on keeps the prompt);
6. the assistant message, any specialist threads and the `TurnCompleted` evidence are
   stored in one transaction (retried with backoff through a database outage), then `finish`.
A provider, stream or framework failure fires `StopFailure`, ends the stream with an
`error` event and stores the answer as streamed so far, marked with the failure.
Cancellation stores it marked `cancelled` (a user's CancelTurn) or `interrupted` (the client went
away with continueOnDisconnect off, the service stops).

`run` takes a prepared turn and an output and says how the turn ended (`TurnEnd`), so a
background task attempt is a second thin entry point over the same turn (its own ids, no
`SessionStart`, the ending mapped onto the task's outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import uuid
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai import Agent, AgentRunResult, DeferredToolResults, ToolApproved, ToolFailed
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage, UsageLimits

from popagent.events.v1 import events_pb2
from popagent_agent_runner.approvals.gate import INTERRUPTED_APPROVED_TEXT, ApprovalGate
from popagent_agent_runner.attachments.prompt import load_attachments
from popagent_agent_runner.attachments.store import AttachmentStore
from popagent_agent_runner.browser.access import BrowserAccessPoint, TurnBrowser
from popagent_agent_runner.context.containment import Containment
from popagent_agent_runner.context.deps import SUPERVISOR_ID, TurnContext, TurnDeps
from popagent_agent_runner.context.events import TurnOutput, usage_metadata
from popagent_agent_runner.context.hands import Hands
from popagent_agent_runner.context.hooks import TurnHooks, bounded, denied
from popagent_agent_runner.docs.documents import Documentation
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.llm.model import classify_model_error, is_estimated, streaming_to
from popagent_agent_runner.llm.prices import counting_cost, turn_cost
from popagent_agent_runner.mcp.toolbox import McpToolbox, TurnMcp
from popagent_agent_runner.memory.long_term import (
    MEMORIES_BEFORE_TURN_LIMIT,
    MemoryStore,
    bounded_memories,
    memories_query,
)
from popagent_agent_runner.memory.observational.layout import TurnMemory, lay_out
from popagent_agent_runner.memory.observational.memory import ObservationalMemory
from popagent_agent_runner.memory.observational.recall import HistorySearch
from popagent_agent_runner.memory.observational.tokens import count_text
from popagent_agent_runner.memory.threads import ThreadStore, TurnFence, TurnState, Version
from popagent_agent_runner.state.sessions import SessionStarts
from popagent_agent_runner.turn.agent_runs import StepProgress, ToolEvents, agent_run_span, run_agent
from popagent_agent_runner.turn.agents_factory import AgentFactory
from popagent_agent_runner.turn.capability import arguments_object, jsonable
from popagent_agent_runner.turn.evidence import outcome_event
from popagent_agent_runner.turn.failure_texts import (
    PROMPT_NOT_STORED_TEXT,
    failure_message,
    failure_text,
    provider_message,
)
from popagent_agent_runner.turn.learned import LearnedCache, compose
from popagent_agent_runner.turn.model_check import refuse_unlisted_models
from popagent_agent_runner.turn.progress import INTERRUPTED_TOOL_TEXT, TurnProgress
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_agent_runner.web.access import WebAccess
from popagent_core.errors import (
    ConfigurationError,
    FailedPrecondition,
    InvalidArgument,
    PopagentError,
    StorageError,
)
from popagent_core.log import trace_id_var, turn_id_var
from popagent_core.telemetry import current_trace_id
from popagent_hooks_client.client import HooksClient
from popagent_hooks_client.events import Event, Outcome

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 100_000
# What one tool's definition adds to a request, for the context-window guard's estimate.
TOOL_TOKENS = 200
# A commit that fails for the database is retried this long (backoff 0.25 s doubling to 2 s):
# longer than a database restart, shorter than a client's patience.
COMMIT_RETRY_S = 30.0
# How long a cancelled turn may take to record that it was interrupted.
INTERRUPTED_WRITE_S = 5.0


# A profile's instructions are the same text turn after turn: counted once (BPE on a long one is not cheap).
_instruction_tokens = functools.lru_cache(maxsize=64)(count_text)


@dataclass(frozen=True)
class TurnInput:
    session_id: str
    # The newest user message, parsed at the edge (`UserMessage.parse`).
    message: UserMessage
    # Empty: the persisted default model.
    model: str = ""
    # Empty: the session's workspace.
    workspace_id: str = ""
    # The model catalog's ids, when the gateway had a current answer: the turn is refused when
    # an agent it may run would use another model. None: not checked.
    listed_models: frozenset[str] | None = None
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # The trace the turn's request arrived in (its spans join it), else a fresh id.
    trace_id: str = field(default_factory=lambda: current_trace_id() or uuid.uuid4().hex)
    session_start: bool = True
    # A trusted self-update task's turn: no browser tools (the spec's fixed self-update policy).
    self_update: bool = False
    # The self-update attempt's fixed policy (turn/self_update.py); None: an ordinary turn.
    containment: Containment | None = None
    # The assistant message's id; empty: a new one. A turn run again (taken over) keeps its first.
    answer_id: str = ""


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
    # The turn's record and the runner holding it: its answer is stored only while that holds
    # (a chat turn; None: not fenced, a task turn, whose attempts the tasks service fences).
    fence: TurnFence | None = None


@dataclass(frozen=True)
class GatedPrompt:
    """The prompt `UserPromptSubmit` let through: the user UI message to store, its text, and what this
    turn alone adds (recalled memories, a hook's context), sent after the history (`lay_out`)."""

    message: UserMessage
    instructions: str | None

    @property
    def text(self) -> str:
        return self.message.text


@dataclass
class _Record:
    """What a turn has stored of itself so far (`begin_turn`), so its end can replace the placeholder.

    The prompt is stored while the model is already being asked (`beginning`), so storing it
    adds nothing to the time to first token; no event after the start reaches the client
    before it is stored, and every end of the turn awaits it first.
    """

    prompt: GatedPrompt | None = None
    beginning: asyncio.Task[Version] | None = None

    async def begun(self) -> Version | None:
        """The thread's version once the prompt is stored; None when it never was."""
        if self.beginning is None:
            return None
        with contextlib.suppress(Exception):
            return await asyncio.shield(self.beginning)
        return None


@dataclass
class SupervisorRun:
    """What the supervisor's runs of one turn leave to commit."""

    new_messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    usage: RunUsage = field(default_factory=RunUsage)
    finish_reason: str = "stop"


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


class TurnRunner:
    def __init__(
        self,
        *,
        threads: ThreadStore,
        memories: MemoryStore,
        hooks: HooksClient,
        factory: AgentFactory,
        starts: SessionStarts,
        web: WebAccess,
        hands: Hands | None = None,
        approvals: ApprovalGate | None = None,
        browser: BrowserAccessPoint | None = None,
        mcp: McpToolbox | None = None,
        learned: LearnedCache | None = None,
        docs: Documentation | None = None,
        observational: ObservationalMemory | None = None,
        history_search: HistorySearch | None = None,
        attachments: AttachmentStore | None = None,
    ) -> None:
        # The session's stored attachments, loaded into the prompt; None: file parts name none (tasks' tests).
        self.attachments = attachments
        # The gate tool calls pass after their hooks; None: the agents' approval policies are not
        # applied (the service always has one; some tests build a runner without).
        self.approvals = approvals
        self.browser = browser
        # Users' MCP servers, whose tools the agents granted them get (read at each turn's start).
        self.mcp = mcp
        # Evolution's learned overlays and skills, composed into every agent resolution.
        self.learned = learned
        self.history_search = history_search
        self.threads = threads
        # The documentation search `searchDocs` uses; None: the tool says it is unavailable.
        self.docs = docs
        # None: every turn replays the whole thread (no observational memory).
        self.observational = observational
        self.web = web
        self.memories = memories
        self.hooks = hooks
        self.factory = factory
        self.starts = starts
        # The workspace tools' repository root and sandbox; None: no workspace tool can work.
        self.hands = hands

    async def prepare(self, turn: TurnInput) -> PreparedTurn:
        """Everything the turn needs before its first event; raises NotFound for an unknown session."""
        # Retention first, so nothing past it is recalled (at most one sweep every few minutes).
        await self.memories.sweep()
        # The relevant memories ride along with the prelude for the prompt as sent; only a prompt a
        # hook rewrites (or hybrid search, with embeddings) costs a second query.
        state = await self.threads.prelude(
            turn.session_id, turn.message.id, memories_query(turn.message.text), MEMORIES_BEFORE_TURN_LIMIT
        )
        if turn.workspace_id and turn.workspace_id != state.workspace_id:
            # The request is well formed; the session it names is in another workspace: a 409.
            raise FailedPrecondition(
                f"workspaceId {turn.workspace_id!r} is not the session's workspace ({state.workspace_id!r})"
            )
        if SUPERVISOR_ID not in state.profiles:
            raise ConfigurationError(f"agent profile {SUPERVISOR_ID!r} is missing")
        if self.learned is not None:
            state = dataclasses.replace(state, profiles=compose(state.profiles, await self.learned.get()))
        if self.attachments is not None:
            files = await load_attachments(self.attachments, turn.session_id, turn.message.ui["parts"])
            turn = dataclasses.replace(turn, message=turn.message.with_files(files))
        if len(turn.message.text) > MAX_PROMPT_CHARS:
            raise InvalidArgument(f"the message text must be at most {MAX_PROMPT_CHARS} characters")
        if turn.listed_models is not None:
            refuse_unlisted_models(state.profiles, state.snapshot.default_model, turn.model, turn.listed_models)
        route = turn.model or state.snapshot.default_model
        return PreparedTurn(turn, state, message_id=turn.answer_id or f"msg-{uuid.uuid4().hex}", route=route)

    async def run(self, prepared: PreparedTurn, output: TurnOutput, progress: TurnProgress | None = None) -> TurnEnd:
        """Run the turn to its end; every outcome but cancellation ends in `finish` or `error`."""
        turn = prepared.input
        with agent_run_span(SUPERVISOR_ID, turn.session_id, turn.session_id, prepared.route) as span:
            span.set_attribute("popagent.turn_id", turn.turn_id)
            end = await self._run(prepared, output, progress)
            span.set_attribute("popagent.turn.outcome", end.outcome)
            if end.error_class is not None:
                span.set_attribute("error.type", str(end.error_class))
            return end

    async def _run(self, prepared: PreparedTurn, output: TurnOutput, progress: TurnProgress | None = None) -> TurnEnd:
        turn = prepared.input
        turn_id_var.set(turn.turn_id)
        trace_id_var.set(turn.trace_id)
        output.start(turn.turn_id, prepared.message_id, prepared.route, turn.trace_id)
        # Let the start go out now: the gateway answers the request as soon as it arrives,
        # while this turn spends the next milliseconds of CPU setting up the model call.
        await asyncio.sleep(0)
        hooks = TurnHooks(self.hooks, turn.session_id, turn.turn_id, prepared.route)
        # Browser settings are read beside the prompt's gate and the memory's assembly; the
        # agents are built once they are in (`_turn`).
        browser_reading = (
            asyncio.create_task(self.browser.for_turn()) if self.browser is not None and not turn.self_update else None
        )
        mcp_reading = (
            asyncio.create_task(self.mcp.for_turn(list(prepared.state.profiles)))
            if self.mcp is not None and not turn.self_update
            else None
        )
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
            web=self.web,
            hands=self.hands.for_turn(
                prepared.state.workspace_id,
                prepared.state.workspace_path,
                prepared.state.snapshot.command_timeout_ms / 1000,
            )
            if self.hands is not None
            else None,
            docs=self.docs,
            history_search=self.history_search,
            message_id=turn.message.id,
            approvals=self.approvals.for_turn(turn.session_id, turn.turn_id, output)
            if self.approvals is not None
            else None,
            containment=turn.containment,
        )
        goal = turn.message.text
        record = _Record()
        try:
            with counting_cost():
                if progress is not None:
                    return await self._go_on(prepared, context, record, progress, browser_reading, mcp_reading)
                return await self._turn(prepared, context, record, browser_reading, mcp_reading)
        except asyncio.CancelledError:
            if record.beginning is not None:
                # A user cancelled it, its client went away or the service stops: what was streamed
                # stays, marked.
                marker = {"cancelled": True} if output.cancelled else {"interrupted": True}
                ending = asyncio.ensure_future(self._store_end(prepared, context, record, marker))
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(ending), INTERRUPTED_WRITE_S)
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
            if failure.error_class is TurnFailure.STORAGE:
                began = record.beginning
                prompt_kept = began is not None and began.done() and not began.cancelled() and not began.exception()
                message = failure_text(TurnFailure.STORAGE) if prompt_kept else PROMPT_NOT_STORED_TEXT
            elif isinstance(exc, PopagentError):
                message = str(exc)  # popagent's own words (a session deleted during the turn, ...)
            else:
                message = failure_message(failure, detail, gateway=self.factory.models.base_url, in_stream=in_stream)
            if record.beginning is not None:
                # Stored before the client reads the error: a reload right after it shows the failure.
                await self._store_end(
                    prepared, context, record, {"failure": message, "errorClass": failure.error_class}
                )
            output.error(failure.error_class, message)
            await self._publish_failure(context, goal, failure.error_class, message)
            return TurnEnd("failed", failure.error_class, message)
        finally:
            if browser_reading is not None and not browser_reading.done():
                browser_reading.cancel()
            if mcp_reading is not None and not mcp_reading.done():
                mcp_reading.cancel()
            if self.observational is not None:
                # However the turn ended: background memory work no longer waits for it.
                self.observational.turn_ended(context.session_id)
            # Background commands belong to the turn: killed when it ends, however it ends.
            if context.hands is not None:
                await context.hands.close()

    async def _turn(
        self,
        prepared: PreparedTurn,
        context: TurnContext,
        record: _Record,
        browser_reading: asyncio.Task[TurnBrowser] | None = None,
        mcp_reading: asyncio.Task[TurnMcp] | None = None,
    ) -> TurnEnd:
        """The turn's steps: gate the prompt, store it, run the supervisor until `Stop` lets it stop, commit."""
        if prepared.input.session_start and self.starts.first_resume(context.session_id):
            await context.hooks.observe(
                Event.SESSION_START, detail={"workspaceId": context.workspace_id, "source": "resume"}
            )
        prompt = await self._gate_prompt(prepared, context)
        if isinstance(prompt, TurnEnd):
            return prompt
        record.prompt = prompt
        record.beginning = asyncio.create_task(
            self._begin_durably(
                session_id=context.session_id,
                user_ui=prompt.message.ui,
                user_request=ModelRequest(parts=[UserPromptPart(content=prompt.message.model_content())]),
                placeholder_ui={
                    **context.output.ui_message(),
                    "metadata": {**context.output.metadata, "interrupted": True},
                },
                fresh=not prepared.state.retried,
            )
        )
        context.output.events.hold_until(record.beginning)
        memory = await self._memory(prepared, context, prompt)
        if browser_reading is not None:
            context.browser = await browser_reading
        if mcp_reading is not None:
            context.mcp = await mcp_reading
        run = await self._run_while_storing_prompt(prepared, context, prompt, record.beginning, memory)
        if isinstance(run, TurnEnd):
            await self._store_end(prepared, context, record, {"failure": run.message, "errorClass": run.error_class})
            return run
        await self._commit(prepared, context, prompt, run, await record.beginning)
        if self.observational is not None:
            reported = run.usage.input_tokens if run.usage.requests == 1 and not is_estimated(run.usage) else None
            try:
                await self.observational.after_turn(
                    context.session_id, prepared.route, memory, reported_prompt_tokens=reported
                )
            except PopagentError as exc:
                logger.warning("observational memory not updated after the turn", extra={"error": str(exc)})
        return ANSWERED

    async def _go_on(
        self,
        prepared: PreparedTurn,
        context: TurnContext,
        record: _Record,
        progress: TurnProgress,
        browser_reading: asyncio.Task[TurnBrowser] | None = None,
        mcp_reading: asyncio.Task[TurnMcp] | None = None,
    ) -> TurnEnd:
        """A turn taken over from a runner that died: its prompt passed its gate and is stored, and its
        model responses and tool results up to its last stored step are not redone. A step whose calls
        were in flight gets each call's result as interrupted (the model decides what to run again)."""
        output = context.output
        output.carry(progress.ui_parts)
        prompt = GatedPrompt(progress.prompt, progress.instructions)
        record.prompt = prompt
        record.beginning = asyncio.ensure_future(self.threads.version(context.session_id))
        messages = list(progress.messages)
        last = messages[-1] if messages else None
        deferred = await self._asked_in_flight(context, last) if progress.in_flight else None
        # With `deferred`, the run itself settles the step's calls (some through the approval gate).
        if deferred is None and progress.in_flight and isinstance(last, ModelResponse):
            returns: list[ModelRequestPart] = []
            for call in last.tool_calls:
                output.tool_input(call.tool_call_id, call.tool_name, arguments_object(call.args or {}))
                output.tool_error(call.tool_call_id, INTERRUPTED_TOOL_TEXT)
                returns.append(
                    ToolReturnPart(
                        tool_name=call.tool_name, content=INTERRUPTED_TOOL_TEXT, tool_call_id=call.tool_call_id
                    )
                )
            messages.append(ModelRequest(parts=returns))
        memory = await self._memory(prepared, context, prompt)
        if browser_reading is not None:
            context.browser = await browser_reading
        if mcp_reading is not None:
            context.mcp = await mcp_reading
        run = await self._run_until_stopped(prepared, context, prompt, memory, carried=messages, deferred=deferred)
        if isinstance(run, TurnEnd):
            await self._store_end(prepared, context, record, {"failure": run.message, "errorClass": run.error_class})
            return run
        await self._commit(prepared, context, prompt, run, await record.beginning)
        return ANSWERED

    async def _asked_in_flight(self, context: TurnContext, last: ModelMessage | None) -> DeferredToolResults | None:
        """For a step taken over whose calls include one that asked for approval: each call's result
        as the run should settle it. None: no call of the step asked (each is reported interrupted).

        A call that asked goes through the approval gate again, which finds its approval: still pending,
        it waits on it (nobody is asked twice); approved and not started, it runs once; denied or
        expired, the model is told. An approved call that started, and every call that never asked,
        is reported interrupted; one that finished has its stored outcome."""
        if self.approvals is None or not isinstance(last, ModelResponse) or not last.tool_calls:
            return None
        store = self.approvals.store
        asked = {
            call.tool_call_id: await store.for_call(context.turn_id, call.tool_call_id) for call in last.tool_calls
        }
        if not any(asked.values()):
            return None
        results = DeferredToolResults()
        for call in last.tool_calls:
            approval = asked[call.tool_call_id]
            if approval is None:
                results.calls[call.tool_call_id] = INTERRUPTED_TOOL_TEXT
            elif approval.execution == "started":
                results.calls[call.tool_call_id] = INTERRUPTED_APPROVED_TEXT
            elif approval.execution == "finished" and approval.outcome is not None:
                outcome = approval.outcome
                results.calls[call.tool_call_id] = outcome["ok"] if "ok" in outcome else ToolFailed(outcome["error"])
            else:
                results.approvals[call.tool_call_id] = ToolApproved()
        return results

    async def _memory(self, prepared: PreparedTurn, context: TurnContext, prompt: GatedPrompt) -> TurnMemory | None:
        """The thread as this turn's first request carries it (observational memory), or None: all of it."""
        if self.observational is None:
            return None
        profile = context.profiles[SUPERVISOR_ID]
        fixed = _instruction_tokens(profile.instructions) + count_text(prompt.instructions or "")
        fixed += TOOL_TOKENS * (len(profile.tools) + 3)
        options = {
            "stop_at_id": prompt.message.id,
            "fixed_tokens": fixed,
            "prompt_tokens": count_text(prompt.text) + 8,
        }
        try:
            return await self.observational.context(
                context.session_id, prepared.route, read=prepared.state.memory, **options
            )
        except (PopagentError, asyncio.CancelledError):
            raise
        except Exception as exc:
            # The Observer's model failed: the turn goes on with what is already observed.
            logger.warning("observation failed; the turn uses the log as it is", extra={"error": str(exc)})
            return await self.observational.context(context.session_id, prepared.route, model_calls=False, **options)

    async def _begin_durably(self, **turn: Any) -> Version:
        """`begin_turn`, retried through a database outage as the commit is (the answer waits for it)."""
        loop = asyncio.get_running_loop()
        delay, deadline = 0.25, loop.time() + COMMIT_RETRY_S
        while True:
            try:
                return await self.threads.begin_turn(**turn)
            except StorageError:
                if loop.time() + delay > deadline:
                    raise
                logger.warning("storing the prompt failed; retrying", extra={"retry_in_s": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _run_while_storing_prompt(
        self,
        prepared: PreparedTurn,
        context: TurnContext,
        prompt: GatedPrompt,
        beginning: asyncio.Task[Version],
        memory: TurnMemory | None = None,
    ) -> SupervisorRun | TurnEnd:
        """`_run_until_stopped` beside the prompt's storing; a failure to store it ends the run with that error.

        The prompt must be kept whatever happens next, so a turn whose prompt cannot be stored
        does not go on to answer it.
        """
        running = asyncio.create_task(self._run_until_stopped(prepared, context, prompt, memory))

        def stop_running(task: asyncio.Task[Version]) -> None:
            if not task.cancelled() and task.exception() is not None:
                running.cancel()

        beginning.add_done_callback(stop_running)
        try:
            run = await running
        except asyncio.CancelledError:
            error = beginning.exception() if beginning.done() and not beginning.cancelled() else None
            if error is not None:
                raise error from None
            raise
        finally:
            beginning.remove_done_callback(stop_running)
            if not running.done():
                running.cancel()
        await beginning  # its error, if storing failed after the run ended
        return run

    async def _gate_prompt(self, prepared: PreparedTurn, context: TurnContext) -> GatedPrompt | TurnEnd:
        """`UserPromptSubmit` on the prompt, then the relevant memories: the prompt the supervisor gets, or the end of a denied turn."""
        output = context.output
        message = prepared.input.message
        text = message.text
        decision = await context.hooks.gate(
            Event.USER_PROMPT_SUBMIT, detail={"prompt": text, "attachments": message.attachments}
        )
        if decision.outcome is Outcome.DENY:
            output.say(denied(decision, "This message"))
            output.finish("other", 0, 0)
            await self._publish(context, text, "failure", denied(decision, "The prompt"), TurnFailure.HOOK_DENIED)
            return TurnEnd("prompt_denied", TurnFailure.HOOK_DENIED, decision.reason or "no reason given")
        if decision.outcome is Outcome.MODIFY and decision.prompt is not None:
            message = message.with_text(decision.prompt)
            text = decision.prompt
            recalled = await self.memories.relevant_memories(text)
        elif self.memories.hybrid:
            recalled = await self.memories.relevant_memories(text)
        else:
            recalled = bounded_memories(prepared.state.relevant_memories)
        return GatedPrompt(message, turn_instructions(recalled, decision.additional_context))

    async def _run_until_stopped(
        self,
        prepared: PreparedTurn,
        context: TurnContext,
        prompt: GatedPrompt,
        memory: TurnMemory | None = None,
        *,
        carried: list[ModelMessage] | None = None,
        deferred: DeferredToolResults | None = None,
    ) -> SupervisorRun | TurnEnd:
        """Run the supervisor until `Stop` lets the answer stand (each `continue` re-runs it with the hook's reason).

        Ends the turn instead when a `continue` comes after `maxProcessorRetries` retries. `carried`:
        the messages a turn taken over had stored (its prompt first); the run goes on after them.
        """
        output = context.output
        agent = self.factory.supervisor(context)
        deps = self.factory.supervisor_deps(context, _UISteps(output))
        snapshot = context.snapshot
        # Prompt-cache order (observational.layout.lay_out): what changes per turn goes after the history.
        layout = lay_out(
            memory.history if memory is not None else prepared.state.history,
            observations=memory.observations if memory is not None else "",
            turn_parts=prompt.instructions,
            prompt_marker=memory.prompt_marker if memory is not None else None,
        )
        history: list[ModelMessage] = layout.history
        model_prompt: str | list[UserContent] | None = prompt.message.model_content()
        run = SupervisorRun()
        if carried:
            history = [*history, *carried]
            run.new_messages.extend(carried)
            model_prompt = None
        retries = 0
        while True:
            try:
                result = await self._run_supervisor(
                    agent,
                    model_prompt,
                    history,
                    deps,
                    run.usage,
                    layout.instructions,
                    progress=self._progress_sink(context, prompt, run.new_messages),
                    deferred=deferred,
                )
                deferred = None
            except UsageLimitExceeded as exc:
                # The final step is reserved for an answer, so this means the model kept calling
                # tools (or answered invalidly) on it: end with a plain account of that. The thread
                # keeps the prompt and that account, not the unfinished tool calls of the run.
                limit_text = (
                    "I stopped before finishing: this turn reached its limit of "
                    f"{snapshot.supervisor_max_steps} model steps ({exc}). Ask me to continue if you want more."
                )
                output.say(limit_text)
                asked = model_prompt if model_prompt is not None else prompt.message.model_content()
                run.new_messages.append(ModelRequest(parts=[UserPromptPart(content=asked)]))
                run.new_messages.append(ModelResponse(parts=[TextPart(content=limit_text)]))
                run.finish_reason = "length"
                return run
            run.new_messages.extend(result.new_messages())
            history = result.all_messages()
            decision = await context.hooks.gate(
                Event.STOP,
                detail={
                    "response": bounded(result.output),
                    "retry": retries,
                    "maxRetries": snapshot.max_processor_retries,
                },
            )
            if decision.outcome is not Outcome.CONTINUE:
                return run
            if retries >= snapshot.max_processor_retries:
                reason = decision.reason or "no reason given"
                message_text = (
                    f"A Stop hook kept this turn from completing after {retries} "
                    f"{'retry' if retries == 1 else 'retries'}: {reason}"
                )
                output.error(TurnFailure.STOP_BLOCKED, message_text)
                await self._publish(context, prompt.text, "failure", message_text, TurnFailure.STOP_BLOCKED)
                return TurnEnd("failed", TurnFailure.STOP_BLOCKED, message_text)
            retries += 1
            model_prompt = decision.reason or "Continue: your answer is not complete yet."
            if decision.additional_context:
                model_prompt = f"{model_prompt}\n\n{decision.additional_context}"

    async def _store_end(
        self, prepared: PreparedTurn, context: TurnContext, record: _Record, marks: dict[str, Any]
    ) -> None:
        """The answer of a turn that did not complete: what was streamed, marked with how it ended."""
        assert record.prompt is not None
        begun = await record.begun()
        if begun is None:
            return  # the prompt was never stored: nothing to replace
        output = context.output
        assistant_ui = output.ui_message()
        assistant_ui["metadata"] = {**assistant_ui["metadata"], **marks}
        streamed = output.text()
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(content=record.prompt.message.model_content())])
        ]
        if streamed:
            messages.append(ModelResponse(parts=[TextPart(content=streamed)]))
        try:
            await self.threads.commit_turn(
                session_id=context.session_id,
                base=prepared.state,
                begun=begun,
                user_ui=record.prompt.message.ui,
                assistant_ui=assistant_ui,
                messages=messages,
                specialist_runs=[],
                outcomes=(),
                fence=prepared.fence,
            )
        except PopagentError as exc:
            # The prompt is stored already; the placeholder keeps saying `interrupted`.
            logger.warning("the end of a turn that did not complete was not stored", extra={"error": str(exc)})

    async def _commit(
        self,
        prepared: PreparedTurn,
        context: TurnContext,
        prompt: GatedPrompt,
        run: SupervisorRun,
        begun: Version | None,
    ) -> None:
        """Store the user and assistant messages, the specialist threads and the outcome evidence, then `finish`."""
        output = context.output
        usage = run.usage
        usage.incr(context.specialist_usage)
        estimated = is_estimated(usage)
        tally = turn_cost.get()
        cost_usd = tally.cost_usd if tally is not None else None
        output.metadata["usage"] = usage_metadata(
            usage.input_tokens,
            usage.output_tokens,
            estimated=estimated,
            cached_input_tokens=usage.cache_read_tokens,
            cost_usd=cost_usd,
        )
        assistant_ui = output.ui_message()  # ends the open text part, so it comes before `text()`
        answer = output.text()
        outcomes = [
            self._outcome(context, prompt.text, "outcome", answer or "(no text)", ""),
            *context.specialist_outcomes,
        ]
        delay, deadline = 0.25, asyncio.get_running_loop().time() + COMMIT_RETRY_S
        while True:
            try:
                await self.threads.commit_turn(
                    session_id=context.session_id,
                    base=prepared.state,
                    begun=begun,
                    user_ui=prompt.message.ui,
                    assistant_ui=assistant_ui,
                    messages=run.new_messages,
                    specialist_runs=context.specialist_runs,
                    outcomes=outcomes,
                    fence=prepared.fence,
                )
                break
            except StorageError:
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise
                logger.warning("storing the answer failed; retrying", extra={"retry_in_s": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        output.finish(
            run.finish_reason,
            usage.input_tokens,
            usage.output_tokens,
            estimated=estimated,
            cached_input_tokens=usage.cache_read_tokens,
            cost_usd=cost_usd,
        )

    def _progress_sink(
        self, context: TurnContext, prompt: GatedPrompt, earlier: list[ModelMessage]
    ) -> StepProgress | None:
        """What stores the turn's progress at each tool step (`TurnOutput.store_progress`), or None: not stored."""
        store = context.output.store_progress
        if store is None:
            return None

        async def stored(messages: list[ModelMessage], in_flight: bool) -> None:
            progress = TurnProgress(
                prompt=prompt.message,
                instructions=prompt.instructions,
                messages=[*earlier, *messages],
                ui_parts=context.output.ui_message()["parts"],
                in_flight=in_flight,
            )
            await store(progress.to_json())

        return stored

    async def _run_supervisor(
        self,
        agent: Agent[TurnDeps, str],
        prompt: str | list[UserContent] | None,
        history: list[ModelMessage],
        deps: TurnDeps,
        usage: RunUsage,
        instructions: str | None,
        *,
        progress: StepProgress | None = None,
        deferred: DeferredToolResults | None = None,
    ) -> AgentRunResult[str]:
        # A fresh step budget per run: the final step of each is reserved for an answer.
        with streaming_to(deps.turn.output):
            return await run_agent(
                agent,
                prompt,
                tool_events=_ui_tool_events(deps.turn.output),
                on_step=progress,
                message_history=history,
                deps=deps,
                usage=usage,
                usage_limits=UsageLimits(request_limit=usage.requests + deps.max_steps),
                instructions=instructions,
                deferred_tool_results=deferred,
            )

    def _outcome(
        self, context: TurnContext, goal: str, kind: Literal["outcome", "failure"], text: str, failure_class: str
    ) -> events_pb2.TurnCompleted:
        return outcome_event(
            context,
            agent_id=SUPERVISOR_ID,
            kind=kind,
            goal=goal,
            text=text,
            failure_class=failure_class,
        )

    async def _publish(
        self, context: TurnContext, goal: str, kind: Literal["outcome", "failure"], text: str, failure_class: str
    ) -> None:
        """The supervisor's outcome of a turn that stored no answer, with the delegations' that ran."""
        specialists, context.specialist_outcomes = context.specialist_outcomes, []
        await self.threads.publish_outcomes([self._outcome(context, goal, kind, text, failure_class), *specialists])

    async def _publish_failure(self, context: TurnContext, goal: str, failure_class: str, text: str) -> None:
        # Evidence of a failure is best effort: the turn already failed and said so.
        with contextlib.suppress(PopagentError):
            await self._publish(context, goal, "failure", text, failure_class)
