"""The client's AI SDK major (`x-popagent-ai-sdk`, docs/approvals.md): ai 5 gets a tool approval request as
a text part and a denial as a tool error, under the same SSE numbers as ai 6; a value that is not a major
is refused on both chat routes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.streaming import UIStreamEncoder
from support.ai_sdk_client import run_ai_sdk_chat

from .harness import API_KEY, USER_MESSAGE, Harness, batch, start

REASON = "the ask rule for tool writeFile"
DENIAL = "The user denied the writeFile call, so it did not run. Their reason: not here"


def approval_turn() -> list[pb.TurnEventBatch]:
    """A turn whose call asks, is denied, and whose model then answers."""
    return [
        batch(start(), pb.TurnEvent(step_start=pb.StepBoundary())),
        batch(
            pb.TurnEvent(tool_input=pb.ToolInput(tool_call_id="c1", tool_name="writeFile", input_json='{"path": "x"}')),
            pb.TurnEvent(
                approval_request=pb.ToolApprovalRequest(approval_id="appr-1", tool_call_id="c1", reason=REASON)
            ),
        ),
        batch(
            pb.TurnEvent(tool_denied=pb.ToolDenied(tool_call_id="c1", approval_id="appr-1", reason=DENIAL)),
            pb.TurnEvent(step_finish=pb.StepBoundary()),
            pb.TurnEvent(step_start=pb.StepBoundary()),
            pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")),
            pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta="Left alone.")),
            pb.TurnEvent(text_end=pb.PartBoundary(part_id="t1")),
            pb.TurnEvent(step_finish=pb.StepBoundary()),
            pb.TurnEvent(finish=pb.TurnFinish(finish_reason="stop", usage=pb.Usage(input_tokens=2, output_tokens=2))),
        ),
    ]


def encoded(ai_sdk: int, first_id: int = 0) -> list[tuple[int | None, dict[str, Any]]]:
    """The turn's SSE events as a client of `ai_sdk` that has the chunks before `first_id` gets them:
    (the `id:` line's number or None, the chunk)."""
    encoder = UIStreamEncoder(first_id, ai_sdk=ai_sdk)
    stream = b"".join(encoder.encode(each) for each in approval_turn()).decode()
    events = []
    for event in stream.split("\n\n")[:-1]:
        fields = dict(line.split(": ", 1) for line in event.splitlines())
        events.append((int(fields["id"]) if "id" in fields else None, json.loads(fields["data"])))
    return events


def test_ai_5_gets_the_request_as_text_under_the_number_ai_6_gives_the_request_chunk() -> None:
    ai5, ai6 = encoded(5), encoded(6)
    assert [number for number, _ in ai6] == list(range(13))
    assert [number for number, _ in ai5 if number is not None] == list(range(13))
    assert (ai6[4], ai6[5]) == (
        (4, {"type": "tool-approval-request", "approvalId": "appr-1", "toolCallId": "c1"}),
        (5, {"type": "tool-output-denied", "toolCallId": "c1"}),
    )
    # Everything else is the same; the request is a text part of three chunks, numbered on the last.
    assert ai5[:4] == ai6[:4] and ai5[8:] == ai6[6:]
    request = ai5[4:7]
    assert [(number, chunk["type"], chunk["id"]) for number, chunk in request] == [
        (None, "text-start", "approval-appr-1"),
        (None, "text-delta", "approval-appr-1"),
        (4, "text-end", "approval-appr-1"),
    ]
    text = request[1][1]["delta"]
    for words in ("The tool writeFile (call c1)", REASON, "appr-1", "popagent UI", "POST /api/approvals/appr-1"):
        assert words in text, words
    assert ai5[7] == (
        5,
        {"type": "tool-output-error", "toolCallId": "c1", "errorText": f"Denied (approval appr-1): {DENIAL}"},
    )


@pytest.mark.parametrize("last_event_id", [3, 4])
def test_an_ai_5_resume_after_a_number_gets_the_whole_text_part_or_none_of_it(last_event_id: int) -> None:
    """A client cut off inside the request's chunks has the number before them: it gets all of them again;
    one that has the request's number gets what follows it."""
    whole = encoded(5)
    resumed = encoded(5, first_id=last_event_id + 1)
    after = next(index for index, (number, _) in enumerate(whole) if number == last_event_id) + 1
    assert resumed == whole[after:]
    assert resumed[0][1]["type"] == ("text-start" if last_event_id == 3 else "tool-output-error")


async def test_the_ai_5_client_reads_an_approval_and_a_denial_without_an_error(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        for each in approval_turn():
            yield each

    harness.runner.script = script
    result = await run_ai_sdk_chat(harness.url, API_KEY, "session-5", "write it", package="ai5")
    assert (result["status"], result["errors"]) == ("ready", [])
    _, assistant = result["messages"]
    [tool] = [part for part in assistant["parts"] if part.get("toolCallId") == "c1"]
    assert (tool["type"], tool["state"], tool["errorText"]) == (
        "tool-writeFile",
        "output-error",
        f"Denied (approval appr-1): {DENIAL}",
    )
    texts = [part["text"] for part in assistant["parts"] if part["type"] == "text"]
    assert len(texts) == 2 and texts[1] == "Left alone."
    assert "The tool writeFile (call c1) waits for a person's approval" in texts[0]
    assert "POST /api/approvals/appr-1" in texts[0]


@pytest.mark.parametrize("value", ["4", "8", "6.0", "ai5", ""])
async def test_a_value_that_is_not_a_major_is_a_422_naming_the_header(refusing_harness: Harness, value: str) -> None:
    headers = {"x-popagent-key": API_KEY, "x-popagent-ai-sdk": value}
    async with httpx.AsyncClient(base_url=refusing_harness.url, headers=headers) as client:
        posted = await client.post("/api/chat", json={"id": "s1", "message": USER_MESSAGE})
        followed = await client.get("/api/chat/s1/stream")
    for refused in (posted, followed):
        assert refused.status_code == 422, refused.text
        [detail] = refused.json()["details"]
        assert detail["loc"] == ["header", "x-popagent-ai-sdk"]
        assert "'5', '6' or '7'" in detail["msg"]
    assert refusing_harness.runner.requests == []
