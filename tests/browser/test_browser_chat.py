"""The browser in chat turns through the gateway, against the real browser server over the socket:
navigate, snapshot, click, type; useBrowserSecret on matching and look-alike origins; access."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from chat.helpers import chat, new_session, of_type, thread_rows

from support.browser_peer import LoginSite
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")


NAV = "bifrostNavigator"


def nav(operation: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(NAV, {"operation": operation, "arguments": arguments}, id=call_id)


def tool_text(chunks: list[Any], call_id: str) -> str:
    [output] = [c for c in of_type(chunks, "tool-output-available") if c["toolCallId"] == call_id]
    return "\n".join(part.get("text", "") for part in output["output"][0]["content"])


def ref_of(snapshot: str, label: str) -> str:
    match = re.search(rf'textbox "{label}" \[ref=((?:f\d+)?e\d+)\]', snapshot)
    assert match, snapshot
    return match.group(1)


async def test_a_turn_navigates_snapshots_clicks_and_types_and_keeps_text_and_images(
    stack: Stack, site: LoginSite
) -> None:
    login = site.url("/login")
    async with stack.client() as client:
        session = await new_session(client)
        stack.models.push(
            Turn.call(nav("browser_navigate", "c-nav", url=login)),
            Turn.call(nav("browser_snapshot", "c-snap")),
            Turn.say("I see the form."),
        )
        first = await chat(client, session, "open the login page")
        user_ref = ref_of(tool_text(first, "c-snap"), "User")
        stack.models.push(
            Turn.call(nav("browser_type", "c-type", target=user_ref, text="alice")),
            Turn.call(nav("browser_click", "c-click", target=user_ref)),
            Turn.call(nav("browser_take_screenshot", "c-shot", type="png", scale="css")),
            Turn.say("Typed the user name."),
        )
        second = await chat(client, session, "type alice")

    assert "Sign in to https://login.test" in tool_text(first, "c-snap")
    assert "fill('alice')" in tool_text(second, "c-type")
    [shot] = [c for c in of_type(second, "tool-output-available") if c["toolCallId"] == "c-shot"]
    [summary, image] = shot["output"]
    assert summary["content"][-1]["type"] == "image" and image["media_type"] == "image/png"
    assert base64.urlsafe_b64decode(image["data"]).startswith(b"\x89PNG")
    # The model got the screenshot as an image part, after the tool's text.
    shot_request = stack.models.requests[-1]["messages"]
    images = [
        item
        for message in shot_request
        if isinstance(message.get("content"), list)
        for item in message["content"]
        if item.get("type") == "image_url"
    ]
    assert images and images[-1]["image_url"]["url"].startswith("data:image/png;base64,")
    rows = await thread_rows(stack, session)
    stored = [p for _, _, content in rows for p in content.get("ui", {}).get("parts", []) if p["type"] == f"tool-{NAV}"]
    stored_shot = next(p for p in stored if p["toolCallId"] == "c-shot")
    assert stored_shot["output"] == shot["output"]
    assert [p["input"]["operation"] for p in stored] == [
        "browser_navigate",
        "browser_snapshot",
        "browser_type",
        "browser_click",
        "browser_take_screenshot",
    ]
