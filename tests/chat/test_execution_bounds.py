"""The agent-runtime execution bounds a run takes from the turn's settings snapshot: a specialist's own
step ceiling (its last step reserved for an answer) and the concurrent tool-call limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chat.helpers import chat_in_a_new_session, of_type, runtime_settings, text_of
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.web_standins import Page, Seen

FINAL_STEP_FEEDBACK = "Reply to the user now with a complete final response"


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_a_specialist_runs_within_its_own_step_ceiling_with_the_last_step_reserved(stack: Stack) -> None:
    async with stack.client() as client, runtime_settings(client, supervisorMaxSteps=10, specialistMaxSteps=2):
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Find the time."}, id="call-d")),
            Turn.call(ToolCall("getTime", {}, id="call-inner")),
            # The researcher answers on its second step: the one its ceiling reserves for an answer.
            Turn.say("It is noon."),
            Turn.say("The researcher says it is noon.", chunk_size=100),
        )
        _, chunks = await chat_in_a_new_session(stack, "what time is it?")
    supervisor_first, specialist_first, specialist_last, supervisor_last = stack.models.requests
    # The supervisor cannot raise a specialist's ceiling: its delegation tool takes a brief and nothing else.
    [delegate] = [t["function"] for t in supervisor_first["tools"] if t["function"]["name"] == "researcher"]
    assert list(delegate["parameters"]["properties"]) == ["brief"]
    assert delegate["parameters"].get("additionalProperties") is False
    assert "getTime" in [tool["function"]["name"] for tool in specialist_first["tools"]]
    # The specialist's ceiling (2), not the supervisor's (10): its second step offers no tools and says why.
    assert "tools" not in specialist_last
    assert FINAL_STEP_FEEDBACK in system_text(specialist_last)
    assert FINAL_STEP_FEEDBACK not in system_text(specialist_first)
    # The supervisor's own steps keep their tools.
    assert "tools" in supervisor_last and FINAL_STEP_FEEDBACK not in system_text(supervisor_last)
    assert text_of(chunks) == "The researcher says it is noon."
    assert of_type(chunks, "data-agentActivity")[-1]["data"]["status"] == "completed"


async def test_a_specialist_that_ignores_its_reserved_step_never_gets_a_step_past_its_ceiling(stack: Stack) -> None:
    async with stack.client() as client, runtime_settings(client, supervisorMaxSteps=10, specialistMaxSteps=2):
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Find the time."}, id="call-d")),
            Turn.call(ToolCall("getTime", {}, id="call-1")),
            # A model that calls a tool on its reserved step anyway: the delegation ends there.
            Turn.call(ToolCall("getTime", {}, id="call-2")),
            Turn.say("The researcher ran out of steps.", chunk_size=100),
        )
        _, chunks = await chat_in_a_new_session(stack, "what time is it?")
    assert len(stack.models.requests) == 4
    activity = of_type(chunks, "data-agentActivity")[-1]["data"]
    assert activity["status"] == "failed"
    assert [iteration["step"] for iteration in activity["iterations"]] == [1, 2]
    # The supervisor read the persisted delegation failure feedback and answered.
    assert stack.models.requests[-1]["messages"][-1]["role"] == "tool"
    assert text_of(chunks) == "The researcher ran out of steps."


def record_arrivals(stack: Stack, arrivals: list[float]) -> Callable[[], None]:
    """Each page request's arrival time appended to `arrivals`; returns the undo."""
    answer = stack.pages.answer

    def timed(seen: Seen) -> Page:
        arrivals.append(time.monotonic())
        return answer(seen)

    stack.pages.answer = timed  # type: ignore[method-assign]
    return lambda: delattr(stack.pages, "answer")


async def test_at_most_max_concurrent_tool_calls_of_one_run_execute_at_once(stack: Stack) -> None:
    # Three fetches of one model step, each page answering after DELAY_S: with a limit of two, two
    # fetches run together and the third starts only when one of them has ended.
    delay_s = 1.0
    urls = []
    for name in ("a", "b", "c"):
        stack.pages.pages[f"/{name}"] = Page(
            body=f"<html><body><p>page {name}</p></body></html>".encode(), delay_s=delay_s
        )
        urls.append(stack.pages.url(f"/{name}"))
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Read three pages."}, id="call-d")),
        Turn.call(*(ToolCall("webFetch", {"url": url}, id=f"call-{i}") for i, url in enumerate(urls))),
        Turn.say("Read all three."),
        Turn.say("Done.", chunk_size=100),
    )
    arrivals: list[float] = []
    undo = record_arrivals(stack, arrivals)
    try:
        async with stack.client() as client, runtime_settings(client, maxConcurrentToolCalls=2):
            _, chunks = await chat_in_a_new_session(stack, "read the pages")
    finally:
        undo()
    assert text_of(chunks) == "Done."
    assert sorted(seen.path for seen in stack.pages.requests) == ["/a", "/b", "/c"]
    first, second, third = sorted(arrivals)
    assert second - first < delay_s / 2, "the limit is two, so two fetches run together"
    assert third - first >= delay_s * 0.9, "the third fetch must wait for a free slot"
