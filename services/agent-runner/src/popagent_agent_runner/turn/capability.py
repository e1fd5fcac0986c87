"""The turn's pydantic-ai capability: step bounds, step observation and the tool hook points.

Every agent of a turn (supervisor and specialists) runs with it:
- its last allowed step is reserved for a response: the tools are withdrawn on that
  step (and the agent's instructions carry the persisted final-response feedback), so a
  run never ends on a tool call because it ran out of steps;
- each model request is reported to the run's `StepObserver` (the UI message's steps
  for the supervisor, activity telemetry for a specialist);
- a call whose arguments are larger than `MAX_TOOL_ARGUMENTS_BYTES`, or hold a character no
  store can keep (NUL: PostgreSQL's text and jsonb refuse it; a lone surrogate: no UTF-8 can
  carry it), fails before anything sees it, hooks included: the model reads why, and the call's
  recorded arguments become a short note, so the turn's events and its stored message stay
  within the gRPC and HTTP message limits and the turn's record stays storable;
- `PreToolUse` runs before every tool's argument validation: `deny` becomes a failed
  tool result carrying the reason (the model reads it and carries on), `modify`
  replaces the arguments, which the tool's schema then validates like the model's own;
- then the approval gate (`approvals/gate.py`): the agent's policy may deny the call or ask a person,
  as may a `PreToolUse` hook's `ask`; an approved call is claimed before it runs, so it runs once,
  and never beside another approved call of the same turn, whichever agent made it (calls that
  waited for a person run one at a time, as they were asked; an approved delegation holds the
  turn-wide lock for its whole specialist run, whose own approved calls then go one at a time
  within it);
- a result is made storable as it leaves the tool: NULs and lone surrogates become U+FFFD and
  a result larger than `MAX_TOOL_RESULT_BYTES` is cut, with a marker saying so;
- `PostToolUse` / `PostToolUseFailure` follow every execution, and at most
  `maxConcurrentToolCalls` tools of one run execute at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from typing import Any

import orjson
from opentelemetry.trace import Status, StatusCode
from pydantic_ai import RunContext, ToolFailed
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import RawToolArgs, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ToolFailedError, ToolRetryError
from pydantic_ai.messages import (
    BinaryContent,
    FileUrl,
    ModelResponse,
    ToolCallPart,
    ToolReturn,
    UploadedFile,
    tool_return_ta,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.context.hooks import bounded, denied
from popagent_core.telemetry import TRACER
from popagent_hooks_client.events import Event, Outcome

logger = logging.getLogger(__name__)

# Set (in the task running it, and so in every run it starts) while an approved call holds its turn's
# `approved_calls`: a specialist an approved delegation runs must not wait for the lock its caller holds.
_IN_APPROVED_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("in_approved_call", default=False)


async def _approved_turn(deps: TurnDeps, held: contextlib.AsyncExitStack) -> None:
    """Wait until no other approved call of the turn runs, and hold that until `held` closes.

    Inside an approved call (a delegation's specialist), the call that contains this one holds the
    turn's lock already; the specialist's approved calls go one at a time with its run's own lock."""
    if _IN_APPROVED_CALL.get():
        await held.enter_async_context(deps.approved_calls)
        return
    await held.enter_async_context(deps.turn.approved_calls)
    token = _IN_APPROVED_CALL.set(True)
    held.callback(_IN_APPROVED_CALL.reset, token)


KIB = 1024
# A call's input and its output each travel as one event: in a gRPC stream message (8 MiB), in
# one turn-log message on NATS (1 MiB payload) and in the stored UI message that GET
# /api/sessions/{id} returns in one gRPC answer. Far below all three, far above what a tool
# needs (a workspace read returns at most 256 KiB of text).
MAX_TOOL_ARGUMENTS_BYTES = 256 * KIB
MAX_TOOL_RESULT_BYTES = 384 * KIB
# What a result or an error cut to size ends with, so neither the model nor a person reads it as whole.
TRUNCATED_MARKER = "\n[truncated by popagent: the result was {size} KiB; only its first {limit} KiB are kept]"
# Shown in place of what PostgreSQL cannot store: NUL (text and jsonb refuse it) and a lone surrogate.
REPLACEMENT = "\ufffd"
UNSTORABLE_MESSAGE = (
    "hold a NUL character or a lone surrogate, which cannot be stored; send text without them "
    "(write binary data with a command, e.g. printf with escapes)"
)


def _unstorable(text: str) -> bool:
    return "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text)


def _storable_text(text: str) -> str:
    if not _unstorable(text):
        return text
    return "".join(REPLACEMENT if char == "\x00" or "\ud800" <= char <= "\udfff" else char for char in text)


def storable(value: Any) -> Any:
    """`value` with every string (keys included) storable; the same object when nothing changed."""
    if isinstance(value, str):
        return _storable_text(value)
    if isinstance(value, dict):
        items = [(storable(key), storable(item)) for key, item in value.items()]
        if all(k is key and v is item for (k, v), (key, item) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        changed = [storable(item) for item in value]
        if all(new is old for new, old in zip(changed, value, strict=True)):
            return value
        return changed
    return value


def _holds_unstorable(document: Any) -> bool:
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if _unstorable(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def arguments_problem(args: RawToolArgs) -> tuple[str, dict[str, Any]] | None:
    """Why a call's arguments are refused before anything sees them, and what the call records
    instead of them; None when they may go on."""
    if isinstance(args, dict):
        try:
            size = len(orjson.dumps(args))
        except orjson.JSONEncodeError:  # a lone surrogate
            return UNSTORABLE_MESSAGE, storable(args)
        document: Any = args
        raw = None
    else:
        size = len(args.encode(errors="surrogatepass"))
        document = raw = args
    if size > MAX_TOOL_ARGUMENTS_BYTES:
        too_large = f"are larger than {MAX_TOOL_ARGUMENTS_BYTES // KIB} KiB ({size // KIB} KiB)"
        return too_large, {"omitted": f"{size // KIB} KiB of arguments, refused unread"}
    if raw is not None:
        try:
            # Python's parser, not orjson: it decodes the escapes (`\\u0000`, a lone `\\ud800`)
            # that the tool's validation decodes too.
            document = json.loads(raw or "{}")
        except (ValueError, RecursionError):
            pass  # validation refuses it in turn; its raw characters still have to be storable
    if _holds_unstorable(document):
        recorded = storable(document)
        return UNSTORABLE_MESSAGE, recorded if isinstance(recorded, dict) else {"_raw": recorded}
    return None


def _cut(text: str, size: int) -> str:
    kept = text.encode(errors="surrogatepass")[:MAX_TOOL_RESULT_BYTES].decode(errors="ignore")
    return kept + TRUNCATED_MARKER.format(size=size // KIB, limit=MAX_TOOL_RESULT_BYTES // KIB)


def _multimodal(value: Any) -> bool:
    return isinstance(value, BinaryContent | FileUrl | UploadedFile)


def storable_result(result: Any) -> Any:
    """A tool's result as the turn records it: storable text, at most `MAX_TOOL_RESULT_BYTES`
    of it. Files (a browser screenshot) pass as they are, their size bound where they are made."""
    if isinstance(result, ToolReturn) or _multimodal(result):
        return result
    if isinstance(result, list | tuple) and any(_multimodal(item) for item in result):
        return [item if _multimodal(item) else storable_result(item) for item in result]
    if isinstance(result, str):
        text = _storable_text(result)
        size = len(text.encode())
        return text if size <= MAX_TOOL_RESULT_BYTES else _cut(text, size)
    document = storable(jsonable(result))
    encoded = orjson.dumps(document)
    if len(encoded) > MAX_TOOL_RESULT_BYTES:
        # Cut as JSON text: the model reads the start of what it would have read.
        return _cut(encoded.decode(), len(encoded))
    return document


def _storable_failure(error: BaseException) -> None:
    """A failed call's text (what the model reads and the turn records) made storable, in place."""
    part = getattr(error, "tool_retry", None) or getattr(error, "tool_failed", None)
    content = getattr(part, "content", None)
    if isinstance(content, str):
        fixed = storable_result(content)
        if fixed is not content:
            part.content = fixed  # pyright: ignore[reportAttributeAccessIssue,reportOptionalMemberAccess]


def arguments_object(args: RawToolArgs | ValidatedToolArgs) -> dict[str, Any]:
    """Tool arguments as the JSON object hooks and the UI see (raw JSON text is parsed)."""
    if isinstance(args, dict):
        return args
    if isinstance(args, str | bytes):
        try:
            parsed = orjson.loads(args or b"{}")
        except orjson.JSONDecodeError:
            return {"_raw": args if isinstance(args, str) else args.decode(errors="replace")}
        return parsed if isinstance(parsed, dict) else {"_value": parsed}
    return {}


def jsonable(value: Any) -> Any:
    return tool_return_ta.dump_python(value, mode="json", by_alias=True)


def error_text(error: BaseException) -> str:
    """What a failed tool call reports (the failed part's content when pydantic-ai wrapped it)."""
    if isinstance(error, ToolRetryError | ToolFailedError):
        part = getattr(error, "tool_retry", None) or getattr(error, "tool_return", None)
        content = getattr(part, "content", None)
        if content is not None:
            return content if isinstance(content, str) else orjson.dumps(jsonable(content)).decode()
    return str(error) or type(error).__name__


def _contain(ctx: RunContext[TurnDeps], call: ToolCallPart, args: RawToolArgs | ValidatedToolArgs) -> None:
    """A self-update attempt's fixed policy (context/containment.py); nothing for other turns."""
    turn = ctx.deps.turn
    if turn.containment is None:
        return
    specialists = frozenset(profile.id for profile in turn.profiles.values() if profile.delegation_eligible)
    problem = turn.containment.refusal(ctx.deps.agent_id, call.tool_name, arguments_object(args), specialists)
    if problem is not None:
        raise ToolFailed(f"The {call.tool_name} call is refused by the self-update policy: {problem}.")


class TurnCapability(AbstractCapability[TurnDeps]):
    async def prepare_tools(self, ctx: RunContext[TurnDeps], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        if ctx.run_step >= ctx.deps.max_steps:
            return []
        return tool_defs

    async def before_model_request(
        self, ctx: RunContext[TurnDeps], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        ctx.deps.steps.step_started(ctx.run_step)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[TurnDeps], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        ctx.deps.steps.step_finished(ctx.run_step, response)
        return response

    async def before_tool_validate(
        self, ctx: RunContext[TurnDeps], *, call: ToolCallPart, tool_def: ToolDefinition, args: RawToolArgs
    ) -> RawToolArgs:
        # First: no hook, approval or tool ever receives what the turn could not carry or store.
        refused = arguments_problem(args)
        if refused is not None:
            problem, recorded = refused
            # The call's arguments are what history and the UI record: a note in their place.
            call.args = recorded
            raise ToolFailed(f"The {call.tool_name} call's arguments {problem}. It did not run.")
        _contain(ctx, call, args)
        decision = await ctx.deps.turn.hooks.gate(
            Event.PRE_TOOL_USE,
            target=call.tool_name,
            tool_call_id=call.tool_call_id,
            detail={"arguments": arguments_object(args), "agent": ctx.deps.agent_id},
        )
        if decision.outcome is Outcome.DENY:
            raise ToolFailed(denied(decision, f"The {call.tool_name} call"))
        if decision.outcome in (Outcome.MODIFY, Outcome.ASK) and decision.arguments is not None:
            # The replacement is what runs (and what a person approves), so history and the UI record it.
            refused = arguments_problem(decision.arguments)
            if refused is not None:
                call.args = refused[1]
                raise ToolFailed(f"The {call.tool_name} call's arguments, as a hook replaced them, {refused[0]}.")
            call.args = decision.arguments
            args = decision.arguments
            # A hook can make a self-update call stricter, never looser.
            _contain(ctx, call, args)
        approvals = ctx.deps.turn.approvals
        if approvals is None:
            if decision.outcome is Outcome.ASK:
                raise ToolFailed(f"The {call.tool_name} call needs a person's approval, and nobody can be asked here.")
            return args
        turn = ctx.deps.turn
        await approvals.admit(
            agent_id=ctx.deps.agent_id,
            policy=turn.profiles[ctx.deps.agent_id].tool_approval,
            specialists=frozenset(profile.id for profile in turn.profiles.values() if profile.delegation_eligible),
            tool_name=call.tool_name,
            tool_call_id=call.tool_call_id,
            arguments=arguments_object(args),
            hook=decision,
        )
        return args

    async def wrap_tool_execute(
        self,
        ctx: RunContext[TurnDeps],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        hooks = ctx.deps.turn.hooks
        arguments = arguments_object(args)
        try:
            # Name, call id, agent and outcome only: arguments and results stay out of spans.
            with TRACER.start_as_current_span(
                "tool.call",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.tool_name,
                    "gen_ai.tool.call.id": call.tool_call_id,
                    "gen_ai.agent.id": ctx.deps.agent_id,
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                approvals = ctx.deps.turn.approvals
                approval_id = await approvals.claim(call.tool_call_id) if approvals is not None else None
                try:
                    async with contextlib.AsyncExitStack() as held:
                        # The run's slot first, then the turn-wide lock: a call holding that lock
                        # never waits for a slot another run's call holds while waiting for the lock.
                        await held.enter_async_context(ctx.deps.tool_slots)
                        if approval_id is not None:
                            await _approved_turn(ctx.deps, held)
                        result = storable_result(await handler(args))
                except Exception as exc:
                    _storable_failure(exc)
                    span.set_attribute("popagent.tool.outcome", "failure")
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                    if approvals is not None and approval_id is not None:
                        await approvals.ran(approval_id, {"error": bounded(error_text(exc))})
                        if not ctx.deps.is_supervisor:
                            ctx.deps.turn.output.tool_error(call.tool_call_id, bounded(error_text(exc)))
                    raise
                span.set_attribute("popagent.tool.outcome", "success")
                if approvals is not None and approval_id is not None:
                    await approvals.ran(approval_id, {"ok": jsonable(result)})
                    if not ctx.deps.is_supervisor:
                        # A specialist's call shows in the answer only when it asked: its outcome too.
                        ctx.deps.turn.output.tool_output(call.tool_call_id, jsonable(result))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await hooks.observe(
                Event.POST_TOOL_USE_FAILURE,
                target=call.tool_name,
                tool_call_id=call.tool_call_id,
                detail={"arguments": arguments, "error": bounded(error_text(exc)), "agent": ctx.deps.agent_id},
            )
            raise
        await hooks.observe(
            Event.POST_TOOL_USE,
            target=call.tool_name,
            tool_call_id=call.tool_call_id,
            detail={"arguments": arguments, "result": jsonable(result), "agent": ctx.deps.agent_id},
        )
        return result
