"""A long tool gap on Slack (docs/channels.md, Replies): the reply is delivered whole and exactly once
when the gap outlasts the time a message can still be edited. With an edit window set
(`POPAGENT_CHANNEL_EDIT_WINDOW_S`, scaled down here to 1 s) the message is sealed with the text it
holds before the stand-in stops taking edits of it (1.5 s) and the rest goes to a fresh message; with
none, the stand-in's refusal (`cant_update_message`) rolls the reply over the same way."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import httpx
import pytest
from chat.helpers import reset_for_chat

from channels.helpers import channel_workspace, connect, slack_headers
from channels.standins import dumps, serving
from support.model_gateway import ToolCall, Turn
from support.stacks import CHANNELS_STACK, TASK_HOOK_PATHS, Stack, StackSpec
from support.waiting import eventually

WRITE = "mastra_workspace_write_file"
BEFORE = "Part one: let me write that down."
AFTER = "The tail, which came after a long tool gap."
# Longer than the edit window and the stand-in's edit expiry.
GAP_S = 3.0
STAND_IN_EXPIRY_S = 1.5

WINDOW_STACK = StackSpec(
    "channels_window",
    TASK_HOOK_PATHS,
    frozenset({"secrets", "gateway"}),
    runner_settings={"POPAGENT_CHANNEL_EDIT_INTERVAL_S": "0.2", "POPAGENT_CHANNEL_EDIT_WINDOW_S": "1.0"},
)


@pytest.fixture
async def window_stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await reset_for_chat(await started_stack(WINDOW_STACK))


async def gap_reply(stack: Stack) -> list[str]:
    """A Slack message whose answer is split by a long tool gap; the thread's messages once the tail is in."""
    async with stack.client() as client, serving("slack", "xoxb-" + uuid.uuid4().hex) as slack:
        slack.edit_expiry_s = STAND_IN_EXPIRY_S
        workspace, _ = await channel_workspace(stack, client)
        channel = await connect(client, "slack", slack, workspaceId=workspace)
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "gap.txt", "content": "x\n"}, id="g1"), text=BEFORE),
            Turn.say(AFTER, first_byte_delay_s=GAP_S, chunk_size=6),
        )
        body = dumps(
            {
                "type": "event_callback",
                "event_id": f"Ev{uuid.uuid4().hex[:8]}",
                "event": {"type": "message", "channel": "CG", "user": "U1", "text": "go", "ts": "7.7"},
            }
        )
        async with httpx.AsyncClient(base_url=stack.url) as keyless:
            assert (
                await keyless.post(f"/api/channels/{channel['id']}/events", content=body, headers=slack_headers(body))
            ).status_code == 200
        history = await eventually(
            lambda: client.get(f"/api/channels/{channel['id']}/history"),
            until=lambda r: any(e["direction"] == "out" and AFTER in e["text"] for e in r.json()["entries"]),
            within=40,
        )
        assert history.status_code == 200
        texts = [m.text for m in slack.in_conversation("CG")]
        await client.delete(f"/api/channels/{channel['id']}")
    return texts


async def test_an_edit_window_seals_the_message_before_it_expires_and_the_tail_follows_once(
    window_stack: Stack,
) -> None:
    texts = await gap_reply(window_stack)
    # Sealed with its own text (no status line, no ellipsis) before the platform stopped taking edits.
    assert texts == [BEFORE, AFTER]


async def test_without_a_window_a_refused_edit_rolls_the_tail_over_once(
    started_stack: Callable[[StackSpec], Awaitable[Stack]],
) -> None:
    stack = await reset_for_chat(await started_stack(CHANNELS_STACK))
    texts = await gap_reply(stack)
    # The first message stays as the reader last saw it; the tail is posted once, after it.
    assert len(texts) == 2 and texts[0].startswith(BEFORE) and texts[1] == AFTER
    assert sum(text.count(AFTER) for text in texts) == 1
