"""The gateway app with no services behind it (as tests/gateway/ builds it): the agent card is public and
names the endpoint where the client reached it, or under POPAGENT_PUBLIC_URL; /a2a answers only with the
key, which the key middleware checks on its own before anything behind it runs."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from gateway.harness import key_guard_status, offline_settings

from popagent_gateway.a2a_agent import session_of
from popagent_gateway.app import create_app

KEY = "offline-a2a-key-" + "o" * 16
CARD = "/.well-known/agent-card.json"
GET_TASK = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}
V1 = {"A2A-Version": "1.0"}


def interface_urls(card: dict[str, object]) -> set[str]:
    interfaces = card["supportedInterfaces"]
    assert isinstance(interfaces, list)
    return {interface["url"] for interface in interfaces}


def test_the_card_is_public_and_a2a_answers_only_with_the_key() -> None:
    with TestClient(create_app(offline_settings(KEY))) as client:
        card = client.get(CARD)
        assert card.status_code == 200, card.text
        assert interface_urls(card.json()) == {"http://testserver/a2a"}
        # The 0.3 card's fields too, for the clients of that version.
        assert (card.json()["url"], card.json()["protocolVersion"]) == ("http://testserver/a2a", "0.3")

        refused = client.post("/a2a", json=GET_TASK, headers=V1)
        assert (refused.status_code, refused.json()) == (401, {"error": "missing or wrong x-popagent-key"})
        for key in ({"authorization": f"Bearer {KEY}"}, {"x-popagent-key": KEY}):
            answered = client.post("/a2a", json=GET_TASK, headers={**V1, **key})
            assert answered.status_code == 200, answered.text
            assert answered.json()["error"]["message"] == "Task not found"
        # A method of 0.3 on the same endpoint.
        legacy = client.post(
            "/a2a", json={**GET_TASK, "method": "tasks/get"}, headers={"authorization": f"Bearer {KEY}"}
        )
        assert legacy.status_code == 200, legacy.text
        assert legacy.json()["error"]["code"] == -32001  # task not found
        assert client.get("/a2a", headers={"x-popagent-key": KEY}).status_code == 405


def test_a_configured_public_url_names_the_endpoint() -> None:
    settings = offline_settings(KEY, POPAGENT_PUBLIC_URL="https://agent.example.com/popagent/")
    with TestClient(create_app(settings)) as client:
        card = client.get(CARD).json()
    assert interface_urls(card) == {"https://agent.example.com/popagent/a2a"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"x-popagent-key": KEY[:-1]}, {"authorization": f"Bearer {KEY[:-1]}"}, {"authorization": KEY}],
    ids=["none", "wrong-header", "wrong-bearer", "no-scheme"],
)
async def test_the_key_middleware_refuses_a2a_without_the_key(headers: dict[str, str]) -> None:
    assert await key_guard_status(KEY, "/a2a", headers) == 401
    assert await key_guard_status(KEY, "/a2a/", headers) == 401


async def test_the_key_middleware_admits_a2a_with_the_key_and_leaves_the_card_public() -> None:
    assert await key_guard_status(KEY, "/a2a", {"x-popagent-key": KEY}) == 200
    assert await key_guard_status(KEY, "/a2a", {"authorization": f"Bearer {KEY}"}) == 200
    assert await key_guard_status(KEY, CARD, {}) == 200
    assert await key_guard_status(KEY, "/a2ax", {}) == 200


def test_a_context_is_its_own_session_id_where_it_can_be_else_a_fixed_uuid_of_it() -> None:
    assert session_of("3f0c8a1e-2b8f-4a4e-9d2c-8e6f1f0f2a11") == "3f0c8a1e-2b8f-4a4e-9d2c-8e6f1f0f2a11"
    assert session_of("ctx.42:a_b-c") == "ctx.42:a_b-c"
    mapped = session_of("a context/with spaces")
    assert mapped == session_of("a context/with spaces") != session_of("another context")
    assert str(uuid.UUID(mapped)) == mapped
    assert str(uuid.UUID(session_of("x" * 129))) == session_of("x" * 129)
