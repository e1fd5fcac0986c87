"""Human tool approvals (docs/approvals.md) on the real chat stack: an agent's policy or a PreToolUse
hook's `ask` stops the call until a person answers through /api/approvals; nothing runs before, a
denial never runs, an expired approval is a denial, a session grant applies to its session only,
and an approved call runs exactly once even when the runner that asked is SIGKILLed."""

from __future__ import annotations

import asyncio
import re
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from chat.approvals import answer_approval, chatting, paused, pending, supervisor_policy, workspace
from chat.helpers import chat, new_session, of_type, recorded_turn, text_of
from chat.runners import runner_process
from popagent_agent_runner.tools import TOOLS
from popagent_agent_runner.tools.skills.skill_tools import SKILL_TOOLS
from popagent_agent_runner.tools.workspace import READ_WRITE_TOOLS
from popagent_gateway.runners import rendezvous
from support.ai_sdk_client import run_ai_sdk_approval
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.sse import read_sse
from support.stacks import API_KEY, MODEL, Stack
from support.waiting import eventually

WRITE = "mastra_workspace_write_file"
RUN = "mastra_workspace_execute_command"


def said(text: str) -> Turn:
    """An answer slow enough (at least half a second) for a test to follow the turn after answering."""
    return Turn.say(text, chunk_size=2, chunk_delay_s=0.12)


async def workspace_on(stack: Stack, client: httpx.AsyncClient, address: str) -> tuple[str, Path]:
    """A new workspace and a session in it whose turns go to the runner at `address` first."""
    name = f"repo-{uuid.uuid4().hex[:8]}"
    repo = stack.workspace_root / name
    repo.mkdir()
    assert (await client.post("/api/workspaces", json={"id": name, "name": name, "path": name})).status_code == 201
    while True:
        session = f"approval-{uuid.uuid4().hex[:12]}"
        if rendezvous(session, [*stack.runner_workers, address])[0] == address:
            break
    created = await client.post("/api/sessions", json={"id": session, "title": "approval", "workspaceId": name})
    assert created.status_code == 201, created.text
    return session, repo


async def taken_over(stack: Stack, session: str, *, waiting: bool) -> None:
    """Wait until another runner took the session's turn over (its second attempt holds a fresh lease)."""

    async def attempts() -> int:
        async with stack.db() as conn:
            found = await conn.fetchval(
                "SELECT attempts FROM popagent_turns WHERE session_id = $1 AND status = 'running'"
                " AND lease_until > now() AND ($2 = (waiting_since IS NOT NULL))",
                session,
                waiting,
            )
        return int(found or 0)

    await eventually(attempts, until=lambda count: count == 2, within=30, what="the takeover")


async def followed(client: httpx.AsyncClient, session: str) -> list[Any]:
    """The session's running turn followed from its first chunk to its end."""
    async with client.stream("GET", f"/api/chat/{session}/stream") as response:
        assert response.status_code == 200, "no turn runs on the session"
        return await read_sse(response)


def tool_messages(stack: Stack, index: int) -> list[str]:
    return [m["content"] for m in stack.models.requests[index]["messages"] if m["role"] == "tool"]


async def waiting_since(stack: Stack, session: str) -> object:
    async with stack.db() as conn:
        return await conn.fetchval(
            "SELECT waiting_since FROM popagent_turns WHERE session_id = $1 AND status = 'running'", session
        )


async def test_an_ask_pauses_the_call_until_approved_and_the_call_runs_once(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall(WRITE, {"path": "notes.txt", "content": "approved\n"}, id="w1")),
        said("Written."),
    )
    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            assert (approval["toolName"], approval["toolCallId"], approval["agentId"]) == (WRITE, "w1", "popagent")
            assert approval["arguments"] == {"path": "notes.txt", "content": "approved\n"}
            assert approval["askedBy"] == "policy" and "ask rule for tool" in approval["reason"]
            # Nothing ran, the turn says it waits, and the model was not called again.
            await asyncio.sleep(0.5)
            assert not (repo / "notes.txt").exists()
            assert await waiting_since(stack, session) is not None
            assert len(stack.models.requests) == 1
            answered = await answer_approval(client, approval["id"], "approve")
            assert (answered["state"], answered["scope"], answered["answeredBy"]) == ("approved", "once", "api")
            chunks = await asyncio.wait_for(turn, 30)
        assert (repo / "notes.txt").read_text() == "approved\n"
        assert text_of(chunks) == "Written."
        kinds = [c["type"] for c in chunks[:-1] if c.get("toolCallId") == "w1"]
        assert kinds == ["tool-input-start", "tool-input-available", "tool-approval-request", "tool-output-available"]
        [request] = of_type(chunks, "tool-approval-request")
        assert request["approvalId"] == approval["id"]
        assert await waiting_since(stack, session) is None
        # A second answer is refused: the approval was answered.
        again = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "deny"})
        assert again.status_code == 409 and "approved already" in again.text
        _, assistant = await recorded_turn(stack, session)
        [part] = [p for p in assistant["parts"] if p.get("toolCallId") == "w1"]
        assert part["state"] == "output-available" and part["approval"] == {"id": approval["id"], "approved": True}
        listed = (await client.get("/api/approvals", params={"sessionId": session})).json()["approvals"]
        assert [(a["id"], a["state"]) for a in listed] == [(approval["id"], "approved")]


async def test_a_denied_call_never_runs_and_the_model_reads_the_reason(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall(WRITE, {"path": "notes.txt", "content": "nope\n"}, id="w1")),
        said("Understood."),
    )
    async with stack.client() as client, supervisor_policy(client, [{"group": "workspace-write", "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            await answer_approval(client, approval["id"], "deny", "not in this folder")
            chunks = await asyncio.wait_for(turn, 30)
        assert not (repo / "notes.txt").exists()
        assert text_of(chunks) == "Understood."
        [denied] = of_type(chunks, "tool-output-denied")
        assert denied["toolCallId"] == "w1"
        assert not [c for c in chunks[:-1] if c["type"] in ("tool-output-available", "tool-output-error")]
        [result] = tool_messages(stack, 1)
        assert "denied" in result and "not in this folder" in result
        _, assistant = await recorded_turn(stack, session)
        [part] = [p for p in assistant["parts"] if p.get("toolCallId") == "w1"]
        assert part["state"] == "output-denied"
        assert part["approval"]["approved"] is False and "not in this folder" in part["approval"]["reason"]


async def test_the_shell_asks_unless_the_command_is_allowed_and_a_denied_command_never_runs(stack: Stack) -> None:
    rules = [{"group": "shell", "decision": "ask", "unless": {"command": r"echo [a-z]+"}}]
    stack.models.push(
        Turn.call(ToolCall(RUN, {"command": "echo hello"}, id="x1")),
        Turn.call(ToolCall(RUN, {"command": "touch made.txt && echo made"}, id="x2")),
        said("Done."),
    )
    async with stack.client() as client, supervisor_policy(client, rules):
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            # The allowed command ran without asking; the other one asked.
            assert approval["toolCallId"] == "x2" and approval["arguments"]["command"] == "touch made.txt && echo made"
            await answer_approval(client, approval["id"], "deny", "no new files")
            chunks = await asyncio.wait_for(turn, 30)
        assert not (repo / "made.txt").exists()
        [ran] = [c for c in chunks[:-1] if c["type"] == "tool-output-available"]
        assert ran["toolCallId"] == "x1" and "hello" in orjson.dumps(ran["output"]).decode()
        assert "made" not in "".join(orjson.dumps(c).decode() for c in of_type(chunks, "tool-output-available"))
        assert [c["toolCallId"] for c in of_type(chunks, "tool-output-denied")] == ["x2"]


async def test_approved_calls_of_one_step_are_asked_and_run_one_at_a_time(stack: Stack) -> None:
    """Two calls in one model step that both ask: the second asks only once the first is answered, and
    the approved commands never run at the same time (each prints when it starts and ends)."""
    timed = "echo start $(date +%s%N); sleep 0.6; echo end $(date +%s%N)"
    stack.models.push(
        Turn.call(ToolCall(RUN, {"command": timed}, id="x1"), ToolCall(RUN, {"command": timed}, id="x2")),
        said("Both ran."),
    )
    async with stack.client() as client, supervisor_policy(client, [{"group": "shell", "decision": "ask"}]):
        session, _ = await workspace(stack, client)
        assert paused(await chat(client, session, "run both"))
        [first] = await pending(client, session)
        await asyncio.sleep(0.5)
        assert len(await pending(client, session)) == 1, "the second call asked before the first was answered"
        await answer_approval(client, first["id"], "approve")

        async def the_second() -> str | None:
            return next((a["id"] for a in await pending(client, session) if a["id"] != first["id"]), None)

        second = await eventually(the_second, what="the second call's approval")
        assert second is not None
        await answer_approval(client, second, "approve")
        await eventually(lambda: len(stack.models.requests), until=lambda count: count == 2, what="both results")
        chunks = await followed(client, session)
        assert text_of(chunks) == "Both ran."
    spans = []
    for result in tool_messages(stack, 1):
        start, end = (int(re.findall(rf"{mark} (\d{{19}})", result)[0]) for mark in ("start", "end"))
        spans.append((start, end))
    assert len(spans) == 2
    (_, first_end), (second_start, _) = sorted(spans)
    assert first_end <= second_start, f"the approved calls overlapped: {spans}"


async def test_a_delegation_that_asks_starts_no_specialist_until_approved(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Find the release date."}, id="d1")),
        said("It ships in March."),
        said("March, says the researcher."),
    )
    async with stack.client() as client, supervisor_policy(client, [{"group": "delegation", "decision": "ask"}]):
        session = await new_session(client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            assert (approval["toolName"], approval["arguments"]) == ("researcher", {"brief": "Find the release date."})
            # Only the supervisor's request so far: no specialist ran.
            assert len(stack.models.requests) == 1
            await answer_approval(client, approval["id"], "approve")
            chunks = await asyncio.wait_for(turn, 30)
        assert text_of(chunks) == "March, says the researcher."
        _, specialist, _ = stack.models.requests
        assert "Find the release date." in orjson.dumps(specialist["messages"]).decode()


async def test_a_pre_tool_use_hook_can_ask_and_its_ask_is_audited(stack: Stack) -> None:
    stack.receiver.script("/pre-tool", answer("ask", reason="writes need a look"))
    stack.models.push(
        Turn.call(ToolCall(WRITE, {"path": "hooked.txt", "content": "ok\n"}, id="w1")),
        said("Saved."),
    )
    async with stack.client() as client:
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            assert approval["reason"] == "writes need a look"
            assert approval["askedBy"].startswith("hook:")
            assert not (repo / "hooked.txt").exists()
            await answer_approval(client, approval["id"], "approve")
            chunks = await asyncio.wait_for(turn, 30)
        assert (repo / "hooked.txt").read_text() == "ok\n"
        assert text_of(chunks) == "Saved."
        runs = (await client.get(f"/api/sessions/{session}/hooks")).json()["runs"]
        [asked] = [run for run in runs if run["event"] == "PreToolUse"]
        assert (asked["outcome"], asked["toolCallId"], asked["reason"]) == ("ask", "w1", "writes need a look")


async def test_a_policy_deny_needs_nobody_and_a_hook_deny_wins_over_a_policy_ask(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "look"}, id="d1")),
        Turn.call(ToolCall(WRITE, {"path": "x.txt", "content": "x"}, id="w1")),
        said("Neither happened."),
    )

    def hook(request: Any) -> Any:
        return answer("deny", reason="hook says no") if request.json()["toolCallId"] == "w1" else answer("pass")

    stack.receiver.script("/pre-tool", hook)
    rules = [{"group": "delegation", "decision": "deny"}, {"tool": WRITE, "decision": "ask"}]
    async with stack.client() as client, supervisor_policy(client, rules):
        session, repo = await workspace(stack, client)
        chunks = await chat(client, session, "go")
        assert text_of(chunks) == "Neither happened."
        assert not (repo / "x.txt").exists()
        [delegation] = tool_messages(stack, 1)
        assert "the deny rule for group delegation" in delegation
        assert "hook says no" in tool_messages(stack, 2)[1]
        # The denied delegation never started its specialist.
        assert not stack.hook_requests("SubagentStart")
        assert not of_type(chunks, "tool-approval-request")
        assert (await client.get("/api/approvals", params={"sessionId": session})).json()["approvals"] == []


async def test_an_expired_approval_denies(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall(WRITE, {"path": "late.txt", "content": "late"}, id="w1")), said("Ok."))
    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            async with stack.db() as conn:
                await conn.execute("UPDATE popagent_approvals SET expires_at = now() WHERE id = $1", approval["id"])
            chunks = await asyncio.wait_for(turn, 30)
        assert not (repo / "late.txt").exists()
        assert [c["toolCallId"] for c in of_type(chunks, "tool-output-denied")] == ["w1"]
        assert "not approved in time" in tool_messages(stack, 1)[0]
        late = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert late.status_code == 409 and "expired" in late.text


async def test_a_malformed_or_unknown_answer_is_refused_and_changes_nothing(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall(WRITE, {"path": "m.txt", "content": "m"}, id="w1")), said("Ok."))
    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            for body in ({"decision": "maybe"}, {"decision": "approve", "extra": 1}, {}):
                refused = await client.post(f"/api/approvals/{approval['id']}", json=body)
                assert refused.status_code == 422, refused.text
            unknown = await client.post("/api/approvals/appr-unknown", json={"decision": "approve"})
            assert unknown.status_code == 404
            [still] = await pending(client, session)
            assert still["state"] == "pending" and not (repo / "m.txt").exists()
            await answer_approval(client, approval["id"], "deny")
            await asyncio.wait_for(turn, 30)
        assert not (repo / "m.txt").exists()


async def test_an_invalid_policy_is_refused_naming_the_rule(stack: Stack) -> None:
    async with stack.client() as client:
        for rules, words in (
            ([{"decision": "ask"}], "exactly one of tool or group"),
            ([{"tool": WRITE, "group": "shell", "decision": "ask"}], "exactly one of tool or group"),
            ([{"tool": WRITE, "decision": "ask", "unless": {"path": "("}}], "not a regular expression"),
        ):
            refused = await client.patch("/api/agents/popagent", json={"toolApproval": rules})
            assert refused.status_code in (400, 422), refused.text
            assert words in refused.text
        refused = await client.patch("/api/agents/popagent", json={"toolApproval": [{"tool": WRITE, "decision": "x"}]})
        assert refused.status_code == 422
        agents = (await client.get("/api/agents")).json()["agents"]
        assert [agent["toolApproval"] for agent in agents if agent["id"] == "popagent"] == [[]]


async def test_a_session_grant_applies_to_its_session_until_revoked(stack: Stack) -> None:
    def write(call: str) -> Turn:
        return Turn.call(ToolCall(WRITE, {"path": f"{call}.txt", "content": call}, id=call))

    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        stack.models.push(write("a"), said("one"))
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            await answer_approval(client, approval["id"], "approve-session")
            await asyncio.wait_for(turn, 30)
        grants = (await client.get(f"/api/sessions/{session}/approval-grants")).json()["grants"]
        assert [(g["toolName"], g["approvalId"]) for g in grants] == [(WRITE, approval["id"])]
        # The same tool in the same session: no ask.
        stack.models.push(write("b"), said("two"))
        chunks = await chat(client, session, "again")
        assert not of_type(chunks, "tool-approval-request") and (repo / "b.txt").exists()
        # Another session asks.
        other, other_repo = await workspace(stack, client)
        stack.models.push(write("c"), said("three"))
        async with chatting(client, other) as turn:
            [asked] = await pending(client, other)
            await answer_approval(client, asked["id"], "deny")
            await asyncio.wait_for(turn, 30)
        assert not (other_repo / "c.txt").exists()
        # Revoked: the next call in the first session asks again.
        revoked = await client.delete(f"/api/sessions/{session}/approval-grants/{WRITE}")
        assert revoked.status_code == 204
        assert (await client.delete(f"/api/sessions/{session}/approval-grants/{WRITE}")).status_code == 404
        stack.models.push(write("d"), said("four"))
        async with chatting(client, session) as turn:
            [again] = await pending(client, session)
            assert again["toolCallId"] == "d"
            await answer_approval(client, again["id"], "approve")
            await asyncio.wait_for(turn, 30)
        assert (repo / "d.txt").exists()


@pytest.mark.timeout(120)
async def test_an_approval_answered_after_its_runner_was_killed_runs_the_call_exactly_once(
    stack: Stack, tmp_path: Path
) -> None:
    """The runner that asked is SIGKILLed while the call waits; another takes the turn over, waits on the
    same approval (nobody is asked twice), and runs the approved command once."""
    command = "echo ran >> count.txt"
    stack.models.push(Turn.call(ToolCall(RUN, {"command": command}, id="x1")), said("Counted."))
    async with (
        runner_process(stack, tmp_path) as (address, process),
        stack.client() as client,
        supervisor_policy(client, [{"group": "shell", "decision": "ask"}]),
    ):
        session, repo = await workspace_on(stack, client, address)
        assert paused(await chat(client, session, "count"))
        [approval] = await pending(client, session)
        process.send_signal(signal.SIGKILL)
        await process.wait()
        await taken_over(stack, session, waiting=True)
        assert not (repo / "count.txt").exists()
        await answer_approval(client, approval["id"], "approve")
        chunks = await followed(client, session)
    assert (repo / "count.txt").read_text() == "ran\n"
    assert text_of(chunks) == "Counted."
    # One approval for the call, answered once; the request the client saw came again with the same id.
    async with stack.db() as conn:
        rows = await conn.fetch("SELECT id, state, execution FROM popagent_approvals WHERE session_id = $1", session)
    assert [(r["id"], r["state"], r["execution"]) for r in rows] == [(approval["id"], "approved", "finished")]
    assert {c["approvalId"] for c in of_type(chunks, "tool-approval-request")} == {approval["id"]}


@pytest.mark.timeout(120)
async def test_an_approved_call_whose_runner_died_while_it_ran_is_not_run_again(stack: Stack, tmp_path: Path) -> None:
    """Approved, started, and then its runner is SIGKILLed before the result is stored: the runner that
    takes the turn over reports the call interrupted and never runs it a second time."""
    command = "echo ran >> count.txt; sleep 30"
    stack.models.push(Turn.call(ToolCall(RUN, {"command": command}, id="x1")), said("Stopped there."))
    async with (
        runner_process(stack, tmp_path) as (address, process),
        stack.client() as client,
        supervisor_policy(client, [{"tool": RUN, "decision": "ask"}]),
    ):
        session, repo = await workspace_on(stack, client, address)
        assert paused(await chat(client, session, "count"))
        [approval] = await pending(client, session)
        await answer_approval(client, approval["id"], "approve")
        await eventually(lambda: (repo / "count.txt").exists(), what="the approved command to start")
        process.send_signal(signal.SIGKILL)
        await process.wait()
        await taken_over(stack, session, waiting=False)
        chunks = await followed(client, session)
    assert text_of(chunks) == "Stopped there."
    assert (repo / "count.txt").read_text() == "ran\n"
    [result] = tool_messages(stack, 1)
    assert "interrupted" in result and "not run again" in result
    async with stack.db() as conn:
        rows = await conn.fetch("SELECT state, execution FROM popagent_approvals WHERE session_id = $1", session)
    assert [(r["state"], r["execution"]) for r in rows] == [("approved", "started")]


def deny_everything_registered() -> list[dict[str, Any]]:
    """A policy denying each tool agent-runner registers, by name, and every delegation."""
    names = {tool.name for tool in (*TOOLS, *READ_WRITE_TOOLS, *SKILL_TOOLS)}
    return [{"tool": name, "decision": "deny"} for name in sorted(names)] + [
        {"group": "delegation", "decision": "deny"}
    ]


def calls_results(stack: Stack, index: int, prefix: str) -> list[str]:
    messages = stack.models.requests[index]["messages"]
    return [m["content"] for m in messages if m["role"] == "tool" and m["tool_call_id"].startswith(prefix)]


def offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


@pytest.mark.timeout(120)
async def test_no_tool_an_agent_is_offered_reaches_execution_past_the_gate(stack: Stack) -> None:
    """The property behind "one gate": whatever tool source offered it (the registry's members, the
    workspace tools by access, the skill tools, the delegation tools), every tool the supervisor and a
    specialist are offered, called at once, is stopped by a policy naming the registered tools, and
    none of them executes (no PostToolUse or PostToolUseFailure fires)."""
    async with stack.client() as client:
        session, _ = await workspace(stack, client)
        # What each agent is offered, read from the model's requests.
        stack.models.push(Turn.call(ToolCall("researcher", {"brief": "look"}, id="probe")), said("seen"), said("ok"))
        await chat(client, session, "probe")
        supervisor_tools, researcher_tools = offered(stack.models.requests[0]), offered(stack.models.requests[1])
        assert {"researcher", "mastra_workspace_execute_command", "remember"} <= set(supervisor_tools)
        assert researcher_tools
        stack.models.requests.clear()
        stack.receiver.requests.clear()
        policy = deny_everything_registered()
        async with supervisor_policy(client, policy):
            everything = [ToolCall(name, {}, id=f"s-{name}") for name in supervisor_tools]
            stack.models.push(Turn.call(*everything), said("all denied"))
            await chat(client, session, "call everything")
            results = calls_results(stack, 1, "s-")
            assert len(results) == len(supervisor_tools)
            assert all("was denied by the deny rule" in result for result in results), results
        # A specialist's own calls pass the same gate: the researcher denies everything, the supervisor
        # may delegate.
        researcher_policy = await client.patch("/api/agents/researcher", json={"toolApproval": policy})
        assert researcher_policy.status_code == 200, researcher_policy.text
        try:
            stack.models.requests.clear()
            everything = [ToolCall(name, {}, id=f"r-{name}") for name in researcher_tools]
            stack.models.push(
                Turn.call(ToolCall("researcher", {"brief": "call all"}, id="d1")),
                Turn.call(*everything),
                said("researcher done"),
                said("all denied"),
            )
            await chat(client, session, "delegate")
            results = calls_results(stack, 2, "r-")
            assert len(results) == len(researcher_tools)
            assert all("was denied by the deny rule" in result for result in results), results
        finally:
            restored = await client.patch("/api/agents/researcher", json={"toolApproval": []})
            assert restored.status_code == 200
        executed = [
            request
            for event in ("PostToolUse", "PostToolUseFailure")
            for request in stack.hook_requests(event)
            if request["toolCallId"] != "d1"
        ]
        assert not executed, executed


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("package", "decision"),
    [("ai", "approve"), ("ai", "deny"), ("ai7", "approve"), ("ai7", "deny")],
    ids=["ai6-approve", "ai6-deny", "ai7-approve", "ai7-deny"],
)
async def test_the_ai_sdk_client_answers_an_approval_with_add_tool_approval_response(
    stack: Stack, package: str, decision: str
) -> None:
    """The real AI SDK client (ai 6 and 7): the stream ends where the turn waits, the tool part is
    `approval-requested`; `addToolApprovalResponse` sends the assistant message back through POST
    /api/chat, whose stream goes on into the same message to the turn's end."""
    stack.models.push(
        Turn.call(ToolCall(WRITE, {"path": "sdk.txt", "content": "from the sdk\n"}, id="w1")), said("All done.")
    )
    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        result = await run_ai_sdk_approval(package, stack.url, API_KEY, session, "write it", decision, "not today")
    assert result["errors"] == [] and result["status"] == "ready", result
    assert [(r["method"], r["status"], r["role"]) for r in result["requests"]] == [
        ("POST", 200, "user"),
        ("POST", 200, "assistant"),
    ]
    user, assistant = result["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    [part] = [p for p in assistant["parts"] if p.get("toolCallId") == "w1"]
    assert part["approval"]["id"] == result["answered"]["approvalId"]
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == "All done."
    if decision == "approve":
        assert part["state"] == "output-available" and part["approval"]["approved"] is True
        assert (repo / "sdk.txt").read_text() == "from the sdk\n"
    else:
        assert part["state"] == "output-denied" and part["approval"]["approved"] is False
        assert not (repo / "sdk.txt").exists()
        assert "not today" in tool_messages(stack, 1)[0]
    # The answer reached the server once, from the chat route.
    async with stack.db() as conn:
        answered_by = await conn.fetchval("SELECT answered_by FROM popagent_approvals WHERE session_id = $1", session)
    assert answered_by == "chat"
    _, stored = await recorded_turn(stack, session)
    assert stored["id"] == assistant["id"]


async def test_an_approval_answer_through_the_chat_route_that_cannot_be_read_is_refused(stack: Stack) -> None:
    """`approved` must be a JSON boolean: anything else is a 422 and the approval stays pending (never
    read as an approval)."""
    stack.models.push(Turn.call(ToolCall(WRITE, {"path": "r.txt", "content": "r"}, id="w1")), said("Ok."))
    async with stack.client() as client, supervisor_policy(client, [{"tool": WRITE, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        first = await chat(client, session, "go")
        assert paused(first)
        [request] = of_type(first, "tool-approval-request")
        assistant = {
            "id": first[0]["messageId"],
            "role": "assistant",
            "parts": [
                {
                    "type": f"tool-{WRITE}",
                    "toolCallId": "w1",
                    "state": "approval-responded",
                    "input": {"path": "r.txt", "content": "r"},
                    "approval": {"id": request["approvalId"], "approved": "yes"},
                }
            ],
        }
        refused = await client.post("/api/chat", json={"id": session, "model": MODEL, "message": assistant})
        assert refused.status_code == 422, refused.text
        [still] = await pending(client, session)
        assert still["id"] == request["approvalId"]
        # A readable answer goes through; its stream is the rest of the turn only.
        assistant["parts"][0]["approval"]["approved"] = False
        async with client.stream(
            "POST", "/api/chat", json={"id": session, "model": MODEL, "message": assistant}
        ) as rest:
            assert rest.status_code == 200
            chunks = await read_sse(rest)
        kinds = [c["type"] for c in chunks[:-1]]
        assert kinds[0] == "start" and "tool-input-available" not in kinds and "tool-approval-request" not in kinds
        assert "tool-output-denied" in kinds and text_of(chunks) == "Ok."
        assert not (repo / "r.txt").exists()
