"""The memory pages in a real browser, against the whole stack run as real processes.

The launcher's `Stack` starts every service as its own process; the scripted model answers the
chat turns and, as structured output, the Observer (support/memory_agents.py). With the memory
settings lowered over the API, ten long turns of one chat get observed. Then tests/ui/memory.mjs
drives Debian's headless Chromium through playwright-core:

- the chat's memory view, reached from the main navigation: its observation log, the last
  compaction and the tokens saved, as `/api/sessions/:id/memory` reports them;
- a long-term memory's kind and pin edited on Settings → Long-term memories, shown after a reload;
  an emptied memory refused with a readable message beside the field;
- Settings → Memory compaction: every memory setting with its one-line description from the
  OpenAPI document.

After the driver, the API reports the edited kind and pin. Screenshots go to tests/output/ui/memory-*.png.
Needs what tests/ui/test_browser.py needs (the built UI, playwright-core, /usr/bin/chromium).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ui.helpers import CHROMIUM, OUTPUT, drive, launched_stack, prerequisites, stack_environment

from popagent_dev import embedded
from popagent_dev.launcher import Stack
from support.memory_agents import is_observer, memory_agents
from support.model_gateway import ModelGateway, ModelInfo
from support.sse import read_sse

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-ui")]

DRIVER = Path(__file__).with_name("memory.mjs")
API_KEY = "memory-browser-key-" + "k" * 16
MODEL = "fake/fake-chat"
# The specialists inherit the chat's model: the one listed model is all a chat needs.
CATALOG = (ModelInfo(MODEL),)
TITLE = "Memory browser test"
LONG = (
    "Here is a long message about my week, with enough words that a few of them cross the smallest "
    "observation threshold: I visited Lisbon, met Ada, counted 1729 pigeons and wrote it all down. "
) * 3


@pytest.fixture
async def stack(
    tmp_path: Path, make_database: Any, nats_server: embedded.NatsProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, ModelGateway]]:
    missing = prerequisites()
    assert not missing, "the browser test needs: " + "; ".join(missing)
    dsn = await make_database()
    (tmp_path / "workspace").mkdir()
    async with ModelGateway(memory_agents(), models=CATALOG) as models:
        environment = stack_environment(
            tmp_path, dsn=dsn, nats_url=nats_server.url, models_url=models.url, api_key=API_KEY
        )
        async with launched_stack(tmp_path, monkeypatch, environment) as running:
            yield running, models


async def _chat(client: httpx.AsyncClient, session: str, text: str) -> None:
    message = {"id": f"user-{uuid.uuid4().hex[:8]}", "role": "user", "parts": [{"type": "text", "text": text}]}
    async with client.stream("POST", "/api/chat", json={"id": session, "model": MODEL, "message": message}) as response:
        assert response.status_code == 200, await response.aread()
        assert (await read_sse(response))[-1] == "[DONE]"


def _memory_settings(openapi: dict[str, Any]) -> list[dict[str, str]]:
    """Every memory setting and its description, as the OpenAPI document declares them."""
    properties = openapi["components"]["schemas"]["MemorySettingsPatch"]["properties"]
    return [{"name": name, "description": spec["description"]} for name, spec in properties.items()]


async def test_memory_pages_in_a_real_browser(stack: tuple[Stack, ModelGateway], tmp_path: Path) -> None:
    running, models = stack
    tag = uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=running.url, headers={"x-popagent-key": API_KEY}, timeout=60) as client:
        changes = {"observationMessageTokens": 1000, "asyncObservationEnabled": False, "rawHistoryRetentionMessages": 2}
        assert (await client.patch("/api/settings/memory", json=changes)).status_code == 200
        session = (await client.post("/api/sessions", json={"title": TITLE})).json()["id"]
        for n in range(10):
            await _chat(client, session, f"{n}: {LONG}")
        assert any(is_observer(body) for body in models.requests), "the Observer never ran"
        view = (await client.get(f"/api/sessions/{session}/memory")).json()
        assert view["entries"] and view["tokensSaved"] > 0 and view["lastCompactionAt"]
        created = await client.post("/api/memories", json={"content": f"Takes the {tag} tram to work", "kind": "fact"})
        assert created.status_code == 201, created.text
        memory = created.json()
        assert (memory["kind"], memory["pinned"]) == ("fact", False)
        settings = _memory_settings((await client.get("/openapi.json")).json())
        assert len(settings) == 19

        steps = await drive(
            DRIVER,
            tmp_path / "memory.json",
            {
                "url": running.url,
                "apiKey": API_KEY,
                "outDir": str(OUTPUT),
                "chromium": str(CHROMIUM),
                "sessionTitle": TITLE,
                "observation": "User said: 0: Here is a long message",
                "tokensSaved": view["tokensSaved"],
                "memoryId": memory["id"],
                "memoryContent": memory["content"],
                "settings": settings,
            },
            timeout_s=180,
        )
        assert steps == [
            "session memory view",
            "kind and pin edited",
            "readable validation error",
            "settings descriptions",
        ]
        # What the browser saved is what the API now reports.
        listed = (await client.get("/api/memories", params={"q": tag})).json()["memories"]
        edited = next(m for m in listed if m["id"] == memory["id"])
        assert (edited["kind"], edited["pinned"], edited["content"]) == ("preference", True, memory["content"])
    for shot in ("session", "memories"):
        assert (OUTPUT / f"memory-{shot}.png").stat().st_size > 10_000, f"{shot} is missing or empty"
