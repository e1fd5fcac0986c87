"""The observability pages in a real browser, against the whole stack run as real processes.

The launcher's `Stack` starts every service as its own process (so each exports its own spans
and writes its own exporter heartbeat); the scripted model answers three turns over real HTTP:
one that calls the clock tool (its PreToolUse hook goes to an HTTPS receiver through the hooks
process), one that delegates to the researcher, and one the model refuses (a failed turn, and a
stored warning log). Then:

- `/api/observability/health` lists every process's exporter (heartbeats through the store);
- tests/ui/observability.mjs drives Debian's headless Chromium through playwright-core: the
  overview (figures, the two uPlot charts, tokens and cost by model, the exporters table), the
  traces list filtered by session and by status and paged, a trace's waterfall opened from the list and
  from its URL (spans of the gateway, agent-runner and hooks processes, a span's attributes),
  and the logs filtered by level and by trace. Screenshots go to tests/output/ui/observability-*.png.

Needs what tests/ui/test_browser.py needs (the built UI, playwright-core, /usr/bin/chromium).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ui.helpers import CHROMIUM, OUTPUT, drive, launched_stack, prerequisites, stack_environment

from popagent_core.topology import SERVICE_NAMES
from popagent_dev import embedded
from popagent_dev.launcher import Stack
from support.https_receiver import HttpsReceiver, answer, make_secret
from support.model_gateway import ModelGateway, ModelInfo, ToolCall, Turn, Usage
from support.sse import read_sse
from support.waiting import eventually

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-ui")]

DRIVER = Path(__file__).with_name("observability.mjs")
API_KEY = "observability-browser-key-" + "k" * 16
HOOK_PATH = "/pre-tool-use"
MODEL = "fake/priced-chat"
PRICING = {"prompt": "0.000002", "completion": "0.00001"}
# The specialists inherit the chat's model: the one listed model is all a chat needs.
CATALOG = (ModelInfo(MODEL, context_length=128_000, pricing=PRICING),)


def respond(body: dict[str, Any]) -> Turn:
    messages = body.get("messages") or []
    prompt = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    tools = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
    usage = Usage(prompt_tokens=1200, completion_tokens=40)
    if "researcher" not in tools:
        return Turn.say("Researcher notes: the answer is 42.", usage=usage)
    if messages and messages[-1].get("role") == "tool":
        return Turn.say("Done: the tool answered.", usage=usage)
    if "refuse" in prompt:
        return Turn.fail(400, "this request is refused by the scripted model")
    if "time" in prompt:
        return Turn.call(ToolCall("getTime", {}), usage=usage)
    return Turn.call(ToolCall("researcher", {"brief": "Find the answer."}), usage=usage)


@pytest.fixture
async def stack(
    tmp_path: Path, make_database: Any, nats_server: embedded.NatsProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, HttpsReceiver]]:
    missing = prerequisites()
    assert not missing, "the browser test needs: " + "; ".join(missing)
    dsn = await make_database()
    observability_dsn = await make_database()
    (tmp_path / "receiver").mkdir()
    (tmp_path / "workspace").mkdir()
    async with HttpsReceiver(tmp_path / "receiver") as receiver, ModelGateway(respond, models=CATALOG) as models:
        receiver.script(HOOK_PATH, answer("pass"))
        hooks = {
            "version": 1,
            "hooks": {
                "PreToolUse": [
                    {
                        "id": "obs-test-clock",
                        "type": "http",
                        "url": receiver.url(HOOK_PATH),
                        "matcher": ["getTime"],
                        "secret": make_secret(),
                        "timeoutMs": 5000,
                    }
                ]
            },
        }
        environment = {
            **stack_environment(
                tmp_path,
                dsn=dsn,
                nats_url=nats_server.url,
                models_url=models.url,
                api_key=API_KEY,
                observability_dsn=observability_dsn,
            ),
            "POPAGENT_HOOKS": json.dumps(hooks),
            "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
            "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
        }
        async with launched_stack(tmp_path, monkeypatch, environment) as running:
            yield running, receiver


async def _turn(client: httpx.AsyncClient, prompt: str) -> tuple[str, str]:
    """One chat turn over HTTP: its session and trace ids."""
    session = (await client.post("/api/sessions", json={"title": prompt})).json()["id"]
    message = {"id": f"user-{session[-8:]}", "role": "user", "parts": [{"type": "text", "text": prompt}]}
    async with client.stream("POST", "/api/chat", json={"id": session, "model": MODEL, "message": message}) as response:
        assert response.status_code == 200, await response.aread()
        chunks = await read_sse(response)
    start = next(c for c in chunks if isinstance(c, dict) and c.get("type") == "start")
    return session, start["messageMetadata"]["traceId"]


def _spans(tree: dict[str, Any]) -> set[tuple[str, str]]:
    """(service, name) of every span of the tree."""
    found: set[tuple[str, str]] = set()
    stack = list(tree.get("roots", []))
    while stack:
        node = stack.pop()
        found.add((node["service"], node["name"]))
        stack += node["children"]
    return found


async def test_observability_pages_in_a_real_browser(stack: tuple[Stack, HttpsReceiver], tmp_path: Path) -> None:
    running, receiver = stack
    async with httpx.AsyncClient(base_url=running.url, headers={"x-popagent-key": API_KEY}, timeout=60) as client:
        time_session, time_trace = await _turn(client, "what time is it?")
        _, delegation_trace = await _turn(client, "ask the researcher")
        _, failed_trace = await _turn(client, "please refuse this")
        assert receiver.requests_for(HOOK_PATH), "the PreToolUse hook was never called"

        async def tree() -> dict[str, Any]:
            answer = await client.get(f"/api/observability/traces/{time_trace}")
            return answer.json() if answer.status_code == 200 else {}

        # The spans the browser looks for, from three processes.
        want = {
            ("popagent-gateway", "POST /api/chat"),
            ("popagent-agent-runner", "tool.call"),
            ("popagent-hooks", "hook.dispatch"),
            ("popagent-agent-runner", "model.generation"),
        }

        await eventually(tree, until=lambda t: want <= _spans(t), interval=0.3, what="the clock turn's spans")

        # Every process's exporter is in health, each from its own heartbeat row.
        async def health() -> dict[str, Any]:
            return (await client.get("/api/observability/health")).json()

        every = {f"popagent-{name}" for name in SERVICE_NAMES}

        def exported(status: dict[str, Any], service: str) -> int:
            # agent-runner may run several workers: one row each.
            return sum(p["exportedSpans"] for p in status["processes"] if p["service"] == service)

        status = await eventually(
            health,
            until=lambda h: (
                every <= {p["service"] for p in h["processes"]}
                and exported(h, "popagent-agent-runner") > 0
                and exported(h, "popagent-hooks") > 0
            ),
            what="a heartbeat of every process, after its spans were exported",
            within=45,
            interval=0.5,
        )
        assert status["storeReachable"] is True
        assert len({(p["service"], p["instance"]) for p in status["processes"]}) == len(status["processes"])
        assert all(not p["stale"] and p["queueLimit"] > 0 and p["droppedSpans"] == 0 for p in status["processes"])

        async def failed_logs() -> list[dict[str, Any]]:
            answer = await client.get("/api/observability/logs", params={"traceId": failed_trace})
            return answer.json()["logs"]

        await eventually(failed_logs, until=bool, interval=0.3, what="the failed turn's stored warning")

    steps = await drive(
        DRIVER,
        tmp_path / "observability.json",
        {
            "url": running.url,
            "apiKey": API_KEY,
            "outDir": str(OUTPUT),
            "chromium": str(CHROMIUM),
            "sessionId": time_session,
            "traceId": time_trace,
            "delegationTraceId": delegation_trace,
            "failedTraceId": failed_trace,
            "model": MODEL,
            "services": sorted(every),
        },
        timeout_s=180,
    )
    assert steps == [
        "overview",
        "overview figures link to the turns they count",
        "traces filtered by session and status",
        "traces paged",
        "waterfall from the list",
        "waterfall from its URL",
        "logs by level and trace",
        "narrow screens",
    ]
    for shot in ("overview-1440", "trace-1440", "logs-1440", "overview-375", "trace-375"):
        assert (OUTPUT / f"observability-{shot}.png").stat().st_size > 10_000, f"{shot} is missing or empty"
