"""popagent's MCP server at /mcp end to end: the official MCP Python client over real HTTP against a
stack with the gateway, agent-runner, the tasks service and the scripted model."""

from __future__ import annotations

import uuid

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_server.helpers import BEARER, HANDSHAKE, MODERN, answer_of, connected, text_of
from support.model_gateway import ToolCall, Turn
from support.stacks import API_KEY, MODEL, SPECIALISTS, Stack
from support.waiting import eventually

TOOLS = {"list_agents", "list_sessions", "get_session", "search_docs", "run_task", "get_task", "chat"}


@pytest.mark.parametrize("revision", [HANDSHAKE, MODERN])
@pytest.mark.parametrize("headers", [BEARER, {"x-popagent-key": API_KEY}], ids=["bearer", "x-popagent-key"])
async def test_a_client_with_the_key_lists_the_tools_and_the_agents(
    stack: Stack, revision: str, headers: dict[str, str]
) -> None:
    async with connected(stack, headers, revision) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        assert tools["chat"].input_schema["required"] == ["prompt"]
        assert tools["get_task"].input_schema["required"] == ["task_id"]
        listed = answer_of(await session.call_tool("list_agents", {}))
    assert {agent["id"] for agent in listed["agents"]} == {"popagent", *SPECIALISTS}
    assert listed["knownTools"]


@pytest.mark.parametrize("revision", [HANDSHAKE, MODERN])
async def test_chat_streams_progress_and_answers_and_the_session_keeps_the_exchange(
    stack: Stack, revision: str
) -> None:
    reply = "The build is green and the release can go out today."
    stack.models.push(Turn.say(reply, chunk_size=6, chunk_delay_s=0.02))
    notified: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notified.append((progress, message))

    async with connected(stack, BEARER, revision) as session:
        outcome = answer_of(
            await session.call_tool(
                "chat", {"prompt": "Is the build green?", "model": MODEL}, progress_callback=on_progress
            )
        )
        assert outcome["status"] == "completed"
        assert outcome["answer"] == reply
        session_id = outcome["sessionId"]
        # Every piece of the reply arrived as progress while it streamed, in order, counted up.
        assert notified, "no progress notification"
        assert "".join(message or "" for _, message in notified) == reply
        assert [value for value, _ in notified] == sorted({value for value, _ in notified})

        transcript = text_of(await session.call_tool("get_session", {"session_id": session_id}))
        assert "## User\n\nIs the build green?\n\n## popagent\n\n" + reply in transcript
        [resource] = (await session.read_resource(f"popagent://sessions/{session_id}")).contents
        assert reply in getattr(resource, "text", "")
        listed = answer_of(await session.call_tool("list_sessions", {}))
        assert session_id in {listed_session["id"] for listed_session in listed["sessions"]}

        # The next turn goes on in the same session, which the model sees.
        stack.models.push(Turn.say("Yes, today."))
        again = answer_of(
            await session.call_tool(
                "chat", {"prompt": "Today?", "session_id": session_id, "model": MODEL}, progress_callback=on_progress
            )
        )
    assert (again["sessionId"], again["answer"]) == (session_id, "Yes, today.")
    assert any("Is the build green?" in str(message) for message in stack.models.requests[-1]["messages"])


async def test_run_task_queues_a_task_that_get_task_follows_to_its_outcome(stack: Stack) -> None:
    stack.models.push(Turn.say("Checked: all green."))
    async with connected(stack, BEARER, MODERN) as session:
        created = answer_of(await session.call_tool("run_task", {"prompt": "Check the build", "model": MODEL}))
        assert (created["prompt"], created["workspaceId"], created["model"]) == ("Check the build", "popagent", MODEL)

        async def task() -> dict[str, object]:
            return answer_of(await session.call_tool("get_task", {"task_id": created["id"]}))

        done = await eventually(task, until=lambda t: t["status"] == "completed", within=20.0, what="the task")
    assert done["outcome"] == "Checked: all green."


async def test_refusals_are_tool_errors_with_the_reason(stack: Stack) -> None:
    async with connected(stack, BEARER, MODERN) as session:
        missing = await session.call_tool("get_session", {"session_id": "no-such-session"})
        assert missing.is_error and "no-such-session" in text_of(missing)
        unknown_task = await session.call_tool("get_task", {"task_id": "no-such-task"})
        assert unknown_task.is_error and "not found" in text_of(unknown_task).lower()
        before = answer_of(await session.call_tool("list_sessions", {}))["sessions"]
        unknown_model = await session.call_tool("chat", {"prompt": "hi", "model": "nobody/no-model"})
        assert unknown_model.is_error and "nobody/no-model" in text_of(unknown_model)
        # Refused before it started: no empty session is left behind.
        assert answer_of(await session.call_tool("list_sessions", {}))["sessions"] == before
        invalid = await session.call_tool("get_session", {"session_id": "../etc"})
        assert invalid.is_error and "session_id" in text_of(invalid)
        stack.models.push(Turn.fail(500, "upstream exploded"))
        failed = await session.call_tool("chat", {"prompt": "hi", "model": MODEL})
        assert failed.is_error
        assert "The model provider failed (HTTP 500): upstream exploded." in text_of(failed)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
WRONG_KEYS = [
    {},
    {"x-popagent-key": ""},
    {"x-popagent-key": API_KEY[:-1]},
    {"authorization": f"Bearer {API_KEY.upper()}"},
    {"authorization": "Bearer"},
    {"authorization": API_KEY},
    {"authorization": f"Basic {API_KEY}"},
]


@pytest.mark.parametrize("headers", WRONG_KEYS)
@pytest.mark.parametrize("message", [INITIALIZE, LIST_TOOLS], ids=["initialize", "tools/list"])
async def test_without_the_key_mcp_answers_401_and_no_tools(
    stack: Stack, headers: dict[str, str], message: dict[str, object]
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30.0) as client:
        refused = await client.post("/mcp", json=message, headers={**MCP_HEADERS, **headers})
        assert refused.status_code == 401, refused.text
        assert refused.json() == {"error": "missing or wrong x-popagent-key"}
        # The same request with the key is answered: the refusal above was the key's.
        admitted = await client.post("/mcp", json=message, headers={**MCP_HEADERS, **BEARER})
    assert admitted.status_code == 200, admitted.text
    assert ("list_agents" in admitted.text) == (message is LIST_TOOLS)


async def test_a_chat_that_waits_for_an_approval_says_so_with_the_approval_id(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="t1")), Turn.say("It is noon."))
    async with stack.client() as client:
        [supervisor] = [a for a in (await client.get("/api/agents")).json()["agents"] if a["id"] == "popagent"]
        # As a rule is written (a rule's absent field answers null).
        policy = [
            {key: value for key, value in rule.items() if value is not None} for rule in supervisor["toolApproval"]
        ]
        rules = [{"tool": "getTime", "decision": "ask"}]
        asked = await client.patch("/api/agents/popagent", json={"toolApproval": rules})
        assert asked.status_code == 200, asked.text
        try:
            async with connected(stack, BEARER, MODERN) as session:
                outcome = answer_of(await session.call_tool("chat", {"prompt": "What time is it?", "model": MODEL}))
        finally:
            restored = await client.patch("/api/agents/popagent", json={"toolApproval": policy})
            assert restored.status_code == 200, restored.text
        assert (outcome["status"], outcome["answer"]) == ("waiting-for-approval", "")
        [approval] = outcome["approvals"]
        assert approval["toolName"] == "getTime"
        listed = (await client.get("/api/approvals", params={"sessionId": outcome["sessionId"]})).json()
        assert [(a["id"], a["state"]) for a in listed["approvals"]] == [(approval["approvalId"], "pending")]
        # The waiting turn still runs: the session refuses another (its double-texting policy is reject).
        async with connected(stack, BEARER, MODERN) as session:
            second = await session.call_tool("chat", {"prompt": "Hello?", "session_id": outcome["sessionId"]})
        assert second.is_error and f"running turn {outcome['turnId']}" in text_of(second)
        # The turn waited for this answer, and ends with it.
        answered = await client.post(f"/api/approvals/{approval['approvalId']}", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text

        async def transcript() -> str:
            return (await client.get(f"/api/sessions/{outcome['sessionId']}/export")).text

        await eventually(transcript, until=lambda text: "It is noon." in text, within=20.0, what="the answer")


async def test_search_docs_finds_an_added_document(stack: Stack) -> None:
    path = f"runbooks/backup-{uuid.uuid4().hex[:8]}.md"
    async with stack.client() as client:
        added = await client.post(
            "/api/workspaces/popagent/documents",
            json={"path": path, "content": "# Backup\n\n## Restore\n\nRestore the database with pg_restore."},
        )
        assert added.status_code == 201, added.text
    async with connected(stack, BEARER, MODERN) as session:
        found = answer_of(await session.call_tool("search_docs", {"query": "how do I restore with pg_restore"}))
        unknown = await session.call_tool("search_docs", {"query": "x", "workspace_id": "no-such-workspace"})
    [hit, *_] = found["hits"]
    assert (hit["path"], hit["headingPath"], hit["documentId"]) == (path, ["Backup", "Restore"], added.json()["id"])
    assert unknown.is_error and "no-such-workspace" in text_of(unknown)


@pytest.mark.parametrize("revision", [HANDSHAKE, MODERN])
@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": f"Bearer {API_KEY[:-1]}"}, {"x-popagent-key": API_KEY.upper()}],
    ids=["no-key", "wrong-bearer", "wrong-x-popagent-key"],
)
async def test_the_python_client_without_the_key_gets_401_and_no_tools(
    stack: Stack, revision: str, headers: dict[str, str]
) -> None:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    with pytest.raises(BaseExceptionGroup) as refused:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30.0, event_hooks={"response": [record]}) as http,
            streamable_http_client(f"{stack.url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await (session.discover() if revision == MODERN else session.initialize())
            await session.list_tools()
            pytest.fail("tools listed without the key")
    # The SDK's client reports the refusal as an MCP error; the HTTP answers were all 401.
    assert refused.group_contains(MCPError)
    assert statuses and set(statuses) == {401}, statuses
