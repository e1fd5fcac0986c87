"""Task results posted to a channel (docs/channels.md, Task results): a task created with `channel`
has its result posted to that connection's conversation when it ends, by the tasks service's channel
observer through agent-runner; a connection that is gone makes the post fail (logged) and the task
ends as it would have. A task turn waiting for an approval posts its card there (a needs-you notice),
and an approver's press lets the task go on."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from chat.approvals import supervisor_policy

from channels.helpers import WRITE, card_posted, connect, deliver_telegram
from channels.standins import serving
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually


async def created_task(client: httpx.AsyncClient, workspace: str, channel: dict[str, Any]) -> dict[str, Any]:
    created = await client.post(
        "/api/tasks", json={"prompt": "Summarise the week.", "workspaceId": workspace, "channel": channel}
    )
    assert created.status_code == 201, created.text
    return dict(created.json())


async def ended(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async def current() -> dict[str, Any]:
        return dict((await client.get(f"/api/tasks/{task_id}")).json())

    return await eventually(
        current, until=lambda task: task["status"] in ("completed", "failed", "dead-letter"), within=40
    )


async def test_a_tasks_result_is_posted_to_its_channel_and_a_missing_connection_changes_nothing(
    stack: Stack,
) -> None:
    async with stack.client() as client, serving("telegram", "11:tg-" + uuid.uuid4().hex) as telegram:
        workspace = f"tasks-{uuid.uuid4().hex[:8]}"
        (stack.workspace_root / workspace).mkdir()
        made = await client.post("/api/workspaces", json={"id": workspace, "name": workspace, "path": workspace})
        assert made.status_code == 201, made.text
        channel = await connect(client, "telegram", telegram, workspaceId=workspace)

        stack.models.push(Turn.say("Three things **shipped** this week."))
        task = await created_task(client, workspace, {"connectionId": channel["id"], "conversation": "-100200"})
        assert task["channel"] == {"connectionId": channel["id"], "conversation": "-100200", "thread": ""}
        finished = await ended(client, task["id"])
        assert finished["status"] == "completed" and finished["channel"]["conversation"] == "-100200"
        texts = await eventually(
            lambda: [m.text for m in telegram.in_conversation("-100200")],
            until=lambda t: len(t) == 1,
            within=20,
        )
        assert "Three things *shipped* this week" in texts[0] and f"`{task['id']}`" in texts[0]

        # A connection deleted before the task ends: the post fails, the task completes all the same.
        stack.models.push(Turn.say("Nobody will read this."))
        orphan = await created_task(
            client, workspace, {"connectionId": "chn-" + "0" * 32, "conversation": "-100200", "thread": "7"}
        )
        assert (await ended(client, orphan["id"]))["status"] == "completed"
        assert [m.text for m in telegram.in_conversation("-100200")] == texts

        bad = await client.post(
            "/api/tasks",
            json={"prompt": "x", "workspaceId": workspace, "channel": {"connectionId": "nope", "conversation": "1"}},
        )
        assert bad.status_code == 422
        await client.delete(f"/api/channels/{channel['id']}")


async def test_a_task_waiting_for_an_approval_posts_its_card_and_a_press_lets_it_finish(stack: Stack) -> None:
    async with stack.client() as client, serving("telegram", "12:tg-" + uuid.uuid4().hex) as telegram:
        workspace = f"tasks-{uuid.uuid4().hex[:8]}"
        (stack.workspace_root / workspace).mkdir()
        made = await client.post("/api/workspaces", json={"id": workspace, "name": workspace, "path": workspace})
        assert made.status_code == 201, made.text
        channel = await connect(client, "telegram", telegram, approvers=["42"], workspaceId=workspace)
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "weekly.txt", "content": "shipped\n"}, id="t1")),
            Turn.say("Wrote the weekly note."),
        )
        async with supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
            task = await created_task(client, workspace, {"connectionId": channel["id"], "conversation": "-100300"})
            card = await card_posted(telegram, "-100300")
            press = {
                "update_id": 90,
                "callback_query": {
                    "id": "cbq-task",
                    "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                    "message": {"message_id": int(card.id), "chat": {"id": -100300, "type": "group"}},
                    "data": card.buttons[0],
                },
            }
            async with httpx.AsyncClient(base_url=stack.url) as keyless:
                assert (await deliver_telegram(keyless, channel["id"], press)).status_code == 200
            assert (await ended(client, task["id"]))["status"] == "completed"
        assert (stack.workspace_root / workspace / "weekly.txt").read_text() == "shipped\n"
        assert not card.buttons and "approved by telegram:42" in card.text
        texts = await eventually(
            lambda: [m.text for m in telegram.in_conversation("-100300") if not m.buttons],
            until=lambda t: len(t) == 2,
            within=20,
        )
        assert "Wrote the weekly note" in texts[-1]
        await client.delete(f"/api/channels/{channel['id']}")


async def test_a_schedule_naming_a_channel_has_each_runs_result_posted_there(stack: Stack) -> None:
    async with stack.client() as client, serving("telegram", "13:tg-" + uuid.uuid4().hex) as telegram:
        workspace = f"tasks-{uuid.uuid4().hex[:8]}"
        (stack.workspace_root / workspace).mkdir()
        made = await client.post("/api/workspaces", json={"id": workspace, "name": workspace, "path": workspace})
        assert made.status_code == 201, made.text
        channel = await connect(client, "telegram", telegram, workspaceId=workspace)
        where = {"connectionId": channel["id"], "conversation": "-100400", "thread": "9"}
        created = await client.post(
            "/api/schedules",
            json={"name": "weekly", "prompt": "Summarise the week.", "cron": "0 0 1 1 *", "workspaceId": workspace}
            | {"channel": where},
        )
        assert created.status_code == 201, created.text
        schedule = created.json()
        assert schedule["channel"] == where
        listed = (await client.get("/api/schedules", params={"workspaceId": workspace})).json()["schedules"]
        assert [s["channel"] for s in listed if s["id"] == schedule["id"]] == [where]

        # Due now: an edit wakes the scheduler, whose run's task carries the channel and posts its result.
        async with stack.db("tasks") as conn:
            await conn.execute(
                "UPDATE popagent_agent_schedules SET next_run_at = now() - interval '1 second' WHERE id = $1::uuid",
                schedule["id"],
            )
        stack.models.push(Turn.say("A scheduled **summary**."))
        renamed = await client.patch(f"/api/schedules/{schedule['id']}", json={"name": "weekly summary"})
        assert renamed.status_code == 200 and renamed.json()["channel"] == where

        async def runs() -> list[dict[str, Any]]:
            listed = (await client.get("/api/tasks", params={"workspaceId": workspace})).json()["tasks"]
            return [t for t in listed if t.get("scheduleId") == schedule["id"]]

        found: list[dict[str, Any]] = await eventually(
            runs, until=lambda r: len(r) == 1, within=30, what="the schedule's run"
        )
        [run] = found
        assert (await client.get(f"/api/tasks/{run['id']}")).json()["channel"] == where
        texts = await eventually(
            lambda: [m.text for m in telegram.in_conversation("-100400")], until=lambda t: len(t) == 1, within=40
        )
        assert "A scheduled *summary*" in texts[0] and run["id"] in texts[0]
        assert [m.thread for m in telegram.in_conversation("-100400")] == ["9"]

        # Removed: later runs post nowhere; both at once is refused.
        both = await client.patch(f"/api/schedules/{schedule['id']}", json={"channel": where, "removeChannel": True})
        assert both.status_code == 422
        removed = await client.patch(f"/api/schedules/{schedule['id']}", json={"removeChannel": True})
        assert removed.status_code == 200 and removed.json()["channel"] is None
        await client.delete(f"/api/schedules/{schedule['id']}")
        await client.delete(f"/api/channels/{channel['id']}")


async def test_a_task_card_answered_in_popagent_is_edited_to_the_decision_and_loses_its_buttons(
    stack: Stack,
) -> None:
    async with stack.client() as client, serving("telegram", "14:tg-" + uuid.uuid4().hex) as telegram:
        workspace = f"tasks-{uuid.uuid4().hex[:8]}"
        (stack.workspace_root / workspace).mkdir()
        made = await client.post("/api/workspaces", json={"id": workspace, "name": workspace, "path": workspace})
        assert made.status_code == 201, made.text
        channel = await connect(client, "telegram", telegram, approvers=["42"], workspaceId=workspace)
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "api.txt", "content": "denied\n"}, id="t2")),
            Turn.say("Left it unwritten."),
        )
        async with supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
            task = await created_task(client, workspace, {"connectionId": channel["id"], "conversation": "-100500"})
            card = await card_posted(telegram, "-100500")
            approval_id = card.buttons[0].split(":", 1)[1]
            answered = await client.post(f"/api/approvals/{approval_id}", json={"decision": "deny"})
            assert answered.status_code == 200, answered.text
            await eventually(lambda: card.buttons, until=lambda b: not b, within=20, what="the card's buttons gone")
            assert "denied by" in card.text
            assert (await ended(client, task["id"]))["status"] == "completed"
        assert not (stack.workspace_root / workspace / "api.txt").exists()
        await client.delete(f"/api/channels/{channel['id']}")
