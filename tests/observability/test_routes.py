"""/api/observability read back from the store: a turn's span tree, the trace list, overview, logs, health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from chat.helpers import chat, new_session

from observability.helpers import reading_gateway, script_a_delegated_tool_call
from popagent_gateway.settings import Settings as GatewaySettings
from support.model_gateway import Turn
from support.stacks import API_KEY, Stack, serve_gateway
from support.tracing import collecting_spans
from support.waiting import eventually


def walk(nodes: list[dict[str, Any]], depth: int = 0) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for node in nodes:
        found.append((depth, node))
        found += walk(node["children"], depth + 1)
    return found


def path_to(node_id: str, nodes: list[dict[str, Any]]) -> list[str]:
    """Names from the root down to the span `node_id` (inclusive)."""
    for node in nodes:
        if node["spanId"] == node_id:
            return [node["name"]]
        below = path_to(node_id, node["children"])
        if below:
            return [node["name"], *below]
    return []


async def test_a_turn_with_a_delegation_a_tool_and_hooks_reads_back_as_one_tree(chat_stack: Stack) -> None:
    stack = chat_stack
    script_a_delegated_tool_call(stack)
    async with reading_gateway(stack) as client:
        with collecting_spans():  # the test process records spans only while a test collects them
            session = await new_session(client)
            chunks = await chat(client, session, "what time is it?")
        trace_id = next(c for c in chunks if isinstance(c, dict) and c.get("type") == "start")["messageMetadata"][
            "traceId"
        ]

        async def the_tree() -> dict[str, Any]:
            response = await client.get(f"/api/observability/traces/{trace_id}")
            return response.json() if response.status_code == 200 else {"roots": [], "answer": response.text}

        def complete(tree: dict[str, Any]) -> bool:
            names = [node["name"] for _, node in walk(tree["roots"])]
            return names.count("agent.run") == 2 and names.count("model.generation") == 4 and "delegation" in names

        tree = await eventually(the_tree, until=complete, what="the turn's stored spans")
        # The test client's own request span is not stored: the gateway's server span is the one root.
        [root] = tree["roots"]
        assert (root["name"], root["kind"]) == ("POST /api/chat", "server")
        nodes = [node for _, node in walk(tree["roots"])]
        assert tree["spanCount"] == len(nodes)
        servers = [n["name"] for n in nodes if n["kind"] == "server"]
        assert any(name.startswith("/popagent.agent_runner") for name in servers)
        assert any(name.startswith("/popagent.hooks") for name in servers)
        [get_time] = [n for n in nodes if n["name"] == "tool.call" and n["attributes"]["gen_ai.tool.name"] == "getTime"]
        assert get_time["attributes"]["popagent.tool.outcome"] == "success"
        assert path_to(get_time["spanId"], tree["roots"])[0] == "POST /api/chat"
        # gateway request -> ... -> supervisor -> delegation tool -> delegation -> researcher -> getTime
        assert path_to(get_time["spanId"], tree["roots"])[-5:] == [
            "agent.run",
            "tool.call",
            "delegation",
            "agent.run",
            "tool.call",
        ]
        assert {"UserPromptSubmit", "PreToolUse", "SubagentStart", "SubagentStop", "Stop"} <= {
            n["attributes"]["popagent.hook.event"] for n in nodes if n["name"] == "hook.dispatch"
        }
        # Children come in start order.
        for node in nodes:
            starts = [child["startedAt"] for child in node["children"]]
            assert starts == sorted(starts)

        # The list finds it by session and by agent, and the overview counts the turn's tokens.
        listed = (await client.get("/api/observability/traces", params={"sessionId": session})).json()
        [summary] = listed["traces"]
        assert summary["traceId"] == trace_id and summary["status"] == "ok" and summary["sessionId"] == session
        assert {"popagent", "researcher"} <= set(summary["agents"]) and summary["rootName"] == "POST /api/chat"
        assert listed["nextCursor"] is None
        by_agent = (await client.get("/api/observability/traces", params={"agentId": "researcher"})).json()
        assert trace_id in [t["traceId"] for t in by_agent["traces"]]
        failed = await client.get("/api/observability/traces", params={"sessionId": session, "status": "error"})
        assert failed.json()["traces"] == []

        overview = (await client.get("/api/observability/overview")).json()
        assert overview["turns"] >= 1 and overview["latencyP50Ms"] > 0 and overview["firstTokenP95Ms"] >= 0
        researcher_usage = [t for t in overview["tokens"] if t["agentId"] == "researcher"]
        assert researcher_usage and researcher_usage[0]["calls"] >= 2 and researcher_usage[0]["inputTokens"] > 0

        unknown = await client.get("/api/observability/traces/" + "0" * 32)
        assert unknown.status_code == 404


async def test_traces_page_by_cursor_and_failed_turns_filter_by_status(chat_stack: Stack) -> None:
    stack = chat_stack
    async with reading_gateway(stack) as client:
        with collecting_spans():
            session = await new_session(client)
            stack.models.push(Turn.say("one"))
            await chat(client, session, "first")
            stack.models.push(Turn.fail(400, "bad request upstream"))
            await chat(client, session, "second")
            stack.models.push(Turn.say("three"))
            await chat(client, session, "third")

        async def listed(**params: Any) -> dict[str, Any]:
            return (await client.get("/api/observability/traces", params={"sessionId": session, **params})).json()

        everything = await eventually(lambda: listed(limit=50), until=lambda page: len(page["traces"]) == 3)
        first = await listed(limit=2)
        assert len(first["traces"]) == 2 and first["nextCursor"]
        second = await listed(limit=2, cursor=first["nextCursor"])
        assert second["nextCursor"] is None
        assert [t["traceId"] for t in first["traces"] + second["traces"]] == [
            t["traceId"] for t in everything["traces"]
        ]
        starts = [t["startedAt"] for t in everything["traces"]]
        assert starts == sorted(starts, reverse=True)
        failed = await eventually(lambda: listed(status="error"), until=lambda page: len(page["traces"]) == 1)
        assert failed["traces"][0]["traceId"] == everything["traces"][1]["traceId"]

        # The failed turn's warning is in the logs, under its trace.
        failed_trace = failed["traces"][0]["traceId"]
        logs = await eventually(
            lambda: client.get("/api/observability/logs", params={"traceId": failed_trace, "level": "warning"}),
            until=lambda r: r.status_code == 200 and r.json()["logs"],
            what="the failed turn's stored warning",
        )
        assert all(log["traceId"] == failed_trace for log in logs.json()["logs"])
        assert all(log["level"] in ("warning", "error", "critical") for log in logs.json()["logs"])
        none_above = await client.get("/api/observability/logs", params={"traceId": failed_trace, "level": "critical"})
        assert [log for log in none_above.json()["logs"] if log["level"] != "critical"] == []

        # A since after until is a well-formed request (no schema can refuse it): an empty window.
        empty = await client.get(
            "/api/observability/traces", params={"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
        )
        assert empty.status_code == 200 and empty.json()["traces"] == []
        assert (await client.get("/api/observability/traces", params={"cursor": "nonsense"})).status_code in (400, 422)


async def test_the_turns_view_of_traces_agrees_with_the_overview(chat_stack: Stack) -> None:
    """Traces of plain requests (the UI's polls among them) are no turns: `kind=turns` lists only the
    turns' traces, and its failed ones are exactly the overview's failed turns, in the same window."""
    stack = chat_stack
    async with reading_gateway(stack) as client:
        since = datetime.now(UTC).isoformat()
        with collecting_spans():
            session = await new_session(client)
            for _ in range(3):
                assert (await client.get("/api/sessions")).status_code == 200
            stack.models.push(Turn.say("one"))
            await chat(client, session, "first")
            stack.models.push(Turn.fail(400, "bad request upstream"))
            await chat(client, session, "second")
        until = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()

        async def listed(**params: Any) -> list[dict[str, Any]]:
            page = await client.get("/api/observability/traces", params={"since": since, "until": until, **params})
            assert page.status_code == 200, page.text
            return list(page.json()["traces"])

        def all_in(traces: list[dict[str, Any]]) -> bool:
            return (
                sum(t["turnStatus"] is not None for t in traces) == 2
                and sum(t["rootName"] == "GET /api/sessions" for t in traces) == 3
            )

        async def everything_listed() -> bool:
            return all_in(await listed(limit=200))

        await eventually(everything_listed, what="the requests' and the turns' traces")
        everything = await listed(limit=200)
        assert all(t["turnStatus"] is None for t in everything if t["rootName"] == "GET /api/sessions")
        turns = await listed(kind="turns")
        assert sorted(t["turnStatus"] for t in turns) == ["error", "ok"]
        assert {t["traceId"] for t in turns} == {t["traceId"] for t in everything if t["turnStatus"] is not None}
        failed_turns = await listed(kind="turns", status="error")
        overview = (await client.get("/api/observability/overview", params={"since": since, "until": until})).json()
        assert (overview["turns"], overview["errors"]) == (len(turns), len(failed_turns)) == (2, 1)
        assert (await client.get("/api/observability/traces", params={"kind": "spans"})).status_code in (400, 422)


async def test_health_says_whether_the_store_answers_and_what_the_gateway_dropped(chat_stack: Stack) -> None:
    async with reading_gateway(chat_stack) as client:
        health = (await client.get("/api/observability/health")).json()
    assert health["storeReachable"] is True and health["storeDetail"] == ""
    exporter = health["exporter"]
    assert exporter["queueLimit"] > 0 and exporter["droppedSpans"] >= 0 and "gateway process" in health["covers"]

    # A gateway whose store is unreachable: health answers (200, reachable false, why); reads answer 503.
    settings = GatewaySettings(
        **{**chat_stack.gateway_env, "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    )
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=30.0) as client,
    ):
        down = (await client.get("/api/observability/health")).json()
        assert down["storeReachable"] is False and down["storeDetail"]
        assert (await client.get("/api/observability/traces")).status_code == 503
