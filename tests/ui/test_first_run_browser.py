"""A first run in a real browser, against a fresh stack in front of a model gateway that is not 9Router.

The launcher's `Stack` starts every service as its own process on a new database, so the data
migrations seed it as a fresh install: the default model is 9Router's `cx/gpt-5.3-codex` and the
specialists inherit it. The scripted model gateway lists two other models (none of the 9Router ids)
and answers every request naming the model it ran on. tests/ui/first_run.mjs drives Debian's
headless Chromium through playwright-core:

- fresh: the notice names the unlisted default and no override; one pick of a listed model, and the
  first message is answered on it, the configuration left as seeded;
- preset: with the researcher's and reviewer's overrides of the 9Router preset persisted (written
  here as an install moved off 9Router would have them), Settings → Agents marks both "not
  offered"; inheriting the researcher there drops its badge on save; the chat's notice fixes the
  default and the reviewer in one click, the next message is answered, and no badge is left.

Screenshots go to tests/output/ui/first-run-*.png. Needs what tests/ui/test_browser.py needs (the
built UI, playwright-core, /usr/bin/chromium).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from ui.helpers import CHROMIUM, OUTPUT, drive, launched_stack, prerequisites, stack_environment

from popagent_dev import embedded
from popagent_dev.launcher import Stack
from support.model_gateway import ModelGateway, ModelInfo, Turn

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-ui")]

DRIVER = Path(__file__).with_name("first_run.mjs")
API_KEY = "first-run-browser-key-" + "k" * 16
# An OpenAI-compatible gateway that is not 9Router: none of the seeded or preset ids.
LISTED = ("up/chat-small", "up/chat-large")
CATALOG = tuple(ModelInfo(model, context_length=32_000) for model in LISTED)
SEEDED_DEFAULT = "cx/gpt-5.3-codex"
PRESET_OVERRIDE = "cx/gpt-5.3-codex-spark"
PRESET_AGENTS = ("researcher", "reviewer")
# The second listed model: the picker opens on the first, so choosing this one is the user's one pick.
PICK = LISTED[1]
ANSWER_PREFIX = "Answered on"


def respond(body: dict[str, Any]) -> Turn:
    return Turn.say(f"{ANSWER_PREFIX} {body.get('model')}.")


@pytest.fixture
async def fresh_stack(
    tmp_path: Path, make_database: Any, nats_server: embedded.NatsProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, ModelGateway, str]]:
    missing = prerequisites()
    assert not missing, "the browser test needs: " + "; ".join(missing)
    dsn = await make_database()
    (tmp_path / "workspace").mkdir()
    async with ModelGateway(respond, models=CATALOG) as models:
        environment = stack_environment(
            tmp_path, dsn=dsn, nats_url=nats_server.url, models_url=models.url, api_key=API_KEY
        )
        async with launched_stack(tmp_path, monkeypatch, environment) as running:
            yield running, models, dsn


async def configuration(client: httpx.AsyncClient) -> tuple[str, dict[str, str | None]]:
    settings = (await client.get("/api/settings/agent-runtime")).json()
    agents = (await client.get("/api/agents")).json()["agents"]
    return settings["defaultModel"], {agent["id"]: agent["model"] for agent in agents}


def chat_models(models: ModelGateway) -> list[str]:
    return [body["model"] for body in models.requests]


async def test_a_fresh_stack_answers_the_first_message_after_one_model_pick(
    fresh_stack: tuple[Stack, ModelGateway, str], tmp_path: Path
) -> None:
    running, models, dsn = fresh_stack
    settings = {
        "url": running.url,
        "apiKey": API_KEY,
        "outDir": str(OUTPUT),
        "chromium": str(CHROMIUM),
        "seededDefault": SEEDED_DEFAULT,
        "listed": list(LISTED),
        "pick": PICK,
        "answerPrefix": ANSWER_PREFIX,
        "presetAgents": list(PRESET_AGENTS),
    }
    async with httpx.AsyncClient(base_url=running.url, headers={"x-popagent-key": API_KEY}, timeout=30) as client:
        seeded = await configuration(client)
        assert seeded == (SEEDED_DEFAULT, dict.fromkeys(("popagent", "researcher", "implementer", "reviewer")))

        steps = await drive(
            DRIVER, tmp_path / "fresh.json", {**settings, "scenario": "fresh"}, timeout_s=150, where=" (fresh)"
        )
        assert steps == ["unlisted default noticed", "one model pick, first answer"]
        assert chat_models(models) and set(chat_models(models)) == {PICK}
        # The first answer needed no change to the configuration.
        assert await configuration(client) == seeded

        # An install that used the 9Router preset, now in front of this gateway: the gateway refuses
        # to save an unlisted override, so it is written where agent-runner keeps it.
        conn = await asyncpg.connect(dsn, server_settings={"search_path": "agent_runner"})
        try:
            await conn.execute(
                "UPDATE popagent_agents SET model = $1 WHERE id = ANY($2::text[])", PRESET_OVERRIDE, list(PRESET_AGENTS)
            )
        finally:
            await conn.close()
        unlisted = (await client.get("/api/agents")).json()["unlistedModels"]
        assert [(entry["agentId"], entry["model"]) for entry in unlisted] == [
            (agent, PRESET_OVERRIDE) for agent in PRESET_AGENTS
        ]
        models.requests.clear()

        steps = await drive(
            DRIVER, tmp_path / "preset.json", {**settings, "scenario": "preset"}, timeout_s=150, where=" (preset)"
        )
        assert steps == [
            "not offered badges",
            "inherit saved in settings drops the badge",
            "one click fixes every unlisted setting",
            "no badge left",
        ]
        assert await configuration(client) == (
            PICK,
            dict.fromkeys(("popagent", "researcher", "implementer", "reviewer")),
        )
        assert (await client.get("/api/models")).json()["unlistedModels"] == []
        assert chat_models(models) and set(chat_models(models)) == {PICK}
    for shot in ("fresh", "first-answer", "badges", "notice", "no-badges"):
        assert (OUTPUT / f"first-run-{shot}.png").stat().st_size > 10_000, f"{shot} is missing or empty"
