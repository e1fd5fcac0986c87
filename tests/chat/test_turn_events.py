"""The batching queue between the turn and gRPC: nothing waits before the first text, deltas merge after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelRequest, UserPromptPart

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.context.events import TurnEvents, TurnOutput
from popagent_agent_runner.llm.model import LeanOpenAIModel, streaming_to
from popagent_agent_runner.llm.transport import LeanTransport
from support.model_gateway import ModelGateway, Turn


def kinds(batch: pb.TurnEventBatch) -> list[str]:
    return [str(event.WhichOneof("event")) for event in batch.events]


def started_turn(min_interval_s: float) -> tuple[TurnEvents, TurnOutput, AsyncIterator[pb.TurnEventBatch]]:
    """A turn's event queue with its output, the turn started (`start` queued), and its batches."""
    events = TurnEvents(min_interval_s=min_interval_s)
    output = TurnOutput(events)
    output.start("turn", "message", "model")
    return events, output, events.batches()


async def test_the_start_and_the_first_token_leave_at_once_and_later_deltas_merge() -> None:
    events, output, batches = started_turn(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert kinds(await anext(batches)) == ["start"]
    output.step_start()
    output.text_delta(0, "Hel")
    first = await anext(batches)
    assert kinds(first) == ["step_start", "text_start", "text_delta"]
    assert first.events[2].text_delta.delta == "Hel"
    assert loop.time() - started < 0.1

    # From now on batches are paced; what arrives meanwhile leaves together, one delta per part.
    output.text_delta(0, "lo ")
    output.text_delta(0, "wor")
    paced = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0.05)
    output.text_delta(0, "ld")
    assert not paced.done()
    second = await paced
    assert loop.time() - started >= 0.19
    assert kinds(second) == ["text_delta"]
    assert second.events[0].text_delta.delta == "lo world"

    # Closing flushes at once, and a part boundary splits the merge.
    output.text_delta(0, "!")
    output.text_end()
    output.finish("stop", 1, 2)
    events.close()
    closing = loop.time()
    third = await anext(batches)
    assert loop.time() - closing < 0.1
    assert kinds(third) == ["text_delta", "text_end", "step_finish", "finish"]
    assert [b async for b in batches] == []
    assert output.ui_message()["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Hello world!", "state": "done"},
    ]


async def test_a_non_text_event_takes_the_waiting_text_with_it_at_once() -> None:
    events, output, batches = started_turn(5.0)
    loop = asyncio.get_running_loop()
    await anext(batches)
    output.text_delta(0, "Let me check")
    await anext(batches)  # the first text: at once; from here on text is paced at 5 s

    waiting = asyncio.ensure_future(anext(batches))
    output.text_delta(0, " the time.")
    await asyncio.sleep(0.05)
    assert not waiting.done(), "a text delta alone waits for the interval"
    asked = loop.time()
    output.tool_input("call-1", "getTime", {})
    batch = await waiting
    assert loop.time() - asked < 0.5, "a tool call waited for the text interval"
    assert kinds(batch) == ["text_delta", "text_end", "tool_input"]
    assert batch.events[0].text_delta.delta == " the time."

    # The turn's end is not held back either, however long the interval.
    output.step_start()
    output.text_delta(1, "Noon.")
    output.finish("stop", 3, 4)
    ending = loop.time()
    events.close()
    rest = [b async for b in batches]
    assert loop.time() - ending < 0.5
    assert [kind for b in rest for kind in kinds(b)][-1] == "finish"


async def test_the_end_of_a_model_stream_is_not_held_by_the_tick() -> None:
    """From the first text on, the model stream is taken and forwarded once per interval; once the
    model is done, its last text and the turn's end leave at once, not at the next tick."""
    interval = 60.0
    answer = "".join(f"{n:02d} " for n in range(50))
    events, output, batches = started_turn(interval)
    sent: list[pb.TurnEventBatch] = []

    async def consume() -> None:
        async for batch in batches:
            sent.append(batch)

    consuming = asyncio.ensure_future(consume())
    http = httpx.AsyncClient(transport=LeanTransport(read_timeout_s=None), timeout=None)
    async with ModelGateway([Turn.say(answer, chunk_size=3, chunk_delay_s=0.002)]) as gw, asyncio.timeout(interval / 2):
        model = LeanOpenAIModel("fake/fake-chat", base_url=gw.url, http_client=http)
        output.step_start()  # as the turn's step hooks do around the model request
        with streaming_to(output):
            response = await model_request(model, [ModelRequest(parts=[UserPromptPart("Go")])])
        output.text_end()
        output.finish("stop", 1, 2)
        events.close()
        await consuming
    await http.aclose()
    assert response.text == answer
    kinds_sent = [kinds(batch) for batch in sent]
    first_text = next(n for n, batch in enumerate(kinds_sent) if "text_delta" in batch)
    assert kinds_sent[first_text][-2:] == ["text_start", "text_delta"], "the first token left at once"
    # The rest of the answer arrived within one interval: it leaves together with the turn's end.
    assert kinds_sent[first_text + 1 :] == [["text_delta", "text_end", "step_finish", "finish"]], kinds_sent
    assert output.ui_message()["parts"][1]["text"] == answer


async def test_text_the_model_stream_reads_after_a_shutdown_error_stays_out_of_the_stream() -> None:
    """A stop ends a streamed turn with `error` before its cancellation lands; a delta read meanwhile
    must not open a new part after the client's last event (nor in the stored message)."""
    events, output, batches = started_turn(0.0)
    output.text_delta(0, "word ")
    output.error("shutdown", "the agent runner is stopping")
    output.text_delta(0, "more ")
    output.text_delta(1, "another part")
    events.close()
    sent = [kind for batch in [b async for b in batches] for kind in kinds(batch)]
    assert sent[-1] == "error"
    assert sent.count("text_start") == 1
    assert [p["text"] for p in output.ui_message()["parts"] if p["type"] == "text"] == ["word "]


async def test_nothing_follows_an_abort_not_even_the_step_a_cancelled_model_request_opens() -> None:
    """A cancelled turn's model request may still open its step after the abort (pydantic-ai runs it in a
    shielded task of its own and drains it; tests/chat/test_double_texting.py met it on CI): the abort
    stays the client's last event, and the stored message gets no step after it."""
    events, output, batches = started_turn(0.0)
    output.step_start()
    output.text_delta(0, "partial")
    output.abort()
    output.step_start()
    output.tool_input("call-1", "getTime", {})
    output.text_delta(1, "late")
    events.put(pb.TurnEvent(finish=pb.TurnFinish(finish_reason="stop")))
    events.close()
    sent = [kind for batch in [b async for b in batches] for kind in kinds(batch)]
    assert sent == ["start", "step_start", "text_start", "text_delta", "text_end", "step_finish", "abort"]
    assert [part["type"] for part in output.ui_message()["parts"]].count("step-start") == 1
