"""The Observer and the Reflector run on the turn's selected model (the route the chat request chose),
never on the persisted default: through the stack, with a route other than the default."""

from __future__ import annotations

from typing import Any

from chat.helpers import chat, new_session

from memory.stack_helpers import LONG, OBSERVE_IN_TURN, memory_settings
from support.memory_agents import is_observer, is_reflector, memory_agents, observe
from support.model_gateway import Body, ToolCall, Turn
from support.stacks import MODEL, Stack

# Listed in the stack's catalog and neither the seeded default nor the route the other tests use.
SELECTED = "cx/gpt-5.3-codex-spark"


def wordy_observer(body: Body) -> Turn:
    """The scripted Observer's observations, each padded with LONG: the log passes the smallest
    reflection threshold (1,000 tokens) after a few turns instead of a few dozen."""
    [call] = observe(body).tool_calls
    assert isinstance(call.arguments, dict)
    observations: list[dict[str, Any]] = call.arguments["observations"]
    padded = [{**item, "text": f"{item['text']} {LONG.strip()}"} for item in observations]
    return Turn.call(ToolCall("final_result", {"observations": padded}))


async def test_the_observer_and_the_reflector_run_on_the_turns_selected_model(stack: Stack) -> None:
    scripted = memory_agents()
    stack.models.responder = lambda body: wordy_observer(body) if is_observer(body) else scripted(body)
    async with (
        stack.client() as client,
        memory_settings(client, **OBSERVE_IN_TURN, reflectionObservationTokens=1000),
    ):
        default = (await client.get("/api/settings/agent-runtime")).json()["defaultModel"]
        assert default not in {SELECTED, MODEL}
        session = await new_session(client)
        for n in range(16):
            assert (await chat(client, session, f"{n}: {LONG}", model=SELECTED))[-1] == "[DONE]"
            if any(is_reflector(body) for body in stack.models.requests):
                break
    observer = [body["model"] for body in stack.models.requests if is_observer(body)]
    reflector = [body["model"] for body in stack.models.requests if is_reflector(body)]
    assert observer and reflector, "the turns must have observed and reflected"
    assert set(observer) == set(reflector) == {SELECTED}
