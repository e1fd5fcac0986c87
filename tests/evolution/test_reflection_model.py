"""Reflection runs on the configured model: agent-runner's persisted default model, read for each attempt."""

from __future__ import annotations

from chat.helpers import runtime_settings

from evolution.helpers import agent_id, autonomy, publish_failure, settled_signals, trace_id
from support.model_gateway import Body, Turn
from support.reflection import is_reflection, parse
from support.stacks import MODEL, Stack

# Two models of the scripted catalog, neither the seeded default, so each can only come from the setting.
FIRST_MODEL = "cx/gpt-5.3-codex-spark"
SECOND_MODEL = MODEL


async def test_reflection_asks_the_default_model_of_the_runtime_settings_at_each_attempt(stack: Stack) -> None:
    agent = agent_id()
    asked: list[str] = []

    def respond(body: Body) -> Turn:
        if not is_reflection(body) or parse(body).agent_id != agent:
            return Turn.fail(400, "model gateway: not this test's reflection")
        asked.append(body["model"])
        return Turn.say('{"selections": []}')

    stack.models.responder = respond
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        seeded = (await client.get("/api/settings/agent-runtime")).json()["defaultModel"]
        assert seeded not in {FIRST_MODEL, SECOND_MODEL}
        for count, model in enumerate((FIRST_MODEL, SECOND_MODEL), start=1):
            # A change of the setting reaches the next attempt without restarting evolution.
            async with runtime_settings(client, defaultModel=model):
                await publish_failure(stack, agent, trace_id(), goal=f"case {count}")
                await settled_signals(client, agent, count, "dismissed")
    assert asked == [FIRST_MODEL, SECOND_MODEL]
