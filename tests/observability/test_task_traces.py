"""A task attempt is one trace, named by the task's stored trace id: its lifecycle hooks and its turn."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from support.model_gateway import Turn
from support.stacks import Stack
from support.tracing import Spans, collecting_spans
from support.waiting import eventually


def attempt_span(spans: Spans, task_id: str) -> ReadableSpan | None:
    found = [s for s in spans.named("task.attempt") if (s.attributes or {}).get("popagent.task.id") == task_id]
    return found[0] if found else None


async def test_a_task_attempts_trace_links_its_task_hooks_and_its_turn(task_stack: Stack) -> None:
    stack = task_stack
    stack.models.push(Turn.say("The build is green."))
    with collecting_spans() as spans:
        task_id = await stack.create_task("Check the build status")
        task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
        attempt = await eventually(lambda: attempt_span(spans, task_id), what="the task.attempt span")
        in_trace = spans.of_trace(int(task.trace_id, 16))

    assert task.status == "completed"
    assert attempt in in_trace
    assert (attempt.attributes or {})["popagent.task.attempt"] == 1
    hook_events = [(s.attributes or {})["popagent.hook.event"] for s in in_trace if s.name == "hook.dispatch"]
    assert {"TaskStart", "TaskStop", "UserPromptSubmit", "Stop"} <= set(hook_events)
    [turn] = [s for s in in_trace if s.name == "agent.run"]
    assert (turn.attributes or {})["popagent.turn_id"] == task.turn_id
    assert any(s.name == "model.generation" for s in in_trace)
