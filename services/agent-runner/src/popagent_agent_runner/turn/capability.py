"""The turn's pydantic-ai capability: step bounds, step observation and the tool hook points.

Every agent of a turn (supervisor and specialists) runs with it:
- its last allowed step is reserved for a response: the tools are withdrawn on that
  step (and the agent's instructions carry the persisted final-response feedback), so a
  run never ends on a tool call because it ran out of steps;
- each model request is reported to the run's `StepObserver` (the UI message's steps
  for the supervisor, activity telemetry for a specialist);
- `PreToolUse` runs before every tool's argument validation: `deny` becomes a failed
  tool result carrying the reason (the model reads it and carries on), `modify`
  replaces the arguments, which the tool's schema then validates like the model's own;
- `PostToolUse` / `PostToolUseFailure` follow every execution, and at most
  `maxConcurrentToolCalls` tools of one run execute at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from opentelemetry.trace import Status, StatusCode
from pydantic_ai import RunContext, ToolFailed
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import RawToolArgs, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ToolFailedError, ToolRetryError
from pydantic_ai.messages import ModelResponse, ToolCallPart, tool_return_ta
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.context.hooks import bounded, denied
from popagent_core.telemetry import TRACER
from popagent_hooks_client.events import Event, Outcome

logger = logging.getLogger(__name__)


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
        decision = await ctx.deps.turn.hooks.gate(
            Event.PRE_TOOL_USE,
            target=call.tool_name,
            tool_call_id=call.tool_call_id,
            detail={"arguments": arguments_object(args), "agent": ctx.deps.agent_id},
        )
        if decision.outcome is Outcome.DENY:
            raise ToolFailed(denied(decision, f"The {call.tool_name} call"))
        if decision.outcome is Outcome.MODIFY and decision.arguments is not None:
            # The replacement is what runs, so history and the UI record it as the call.
            call.args = decision.arguments
            return decision.arguments
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
                try:
                    async with ctx.deps.tool_slots:
                        result = await handler(args)
                except Exception as exc:
                    span.set_attribute("popagent.tool.outcome", "failure")
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                    raise
                span.set_attribute("popagent.tool.outcome", "success")
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
