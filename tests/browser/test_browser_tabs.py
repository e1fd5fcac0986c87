"""Each chat session's own tabs in the one browser: `browser_tabs` list/new/select/close see and
touch only the session's tabs, numbered 0..k-1 in the session's own order; another session's
tabs are invisible and refused; popups a page opens (target=_blank, window.open, a timer) belong
to the session whose page opened them; deleting the session closes them all."""

from __future__ import annotations

import re
import uuid
from typing import Any

import grpc
import pytest
from chat.helpers import new_session
from mcp.client.session import ClientSession

from browser.helpers import TAB, Bridge, bridge, tabs_of
from popagent_browser_bridge.bifrost import BifrostClient
from popagent_browser_bridge.navigator import BrowserGate, Navigator
from popagent_browser_bridge.scrub import SecretValues
from popagent_browser_bridge.tabs import RUN_CODE
from popagent_core.lifecycle import background_task
from support.browser_peer import SOCKET_HOST, BrowserPeer, LoginSite
from support.stacks import Stack
from support.waiting import eventually

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")


def ref_of(snapshot: str, role: str, name: str) -> str:
    match = re.search(rf'{role} "{name}" \[ref=(e\d+)\]', snapshot)
    assert match, snapshot
    return match.group(1)


async def server_tab_count(stack: Stack, b: Bridge) -> int:
    """Every tab of the browser, whoever owns it (Playwright code, allowed for this check only)."""
    async with stack.client() as client:
        (await client.patch("/api/settings/browser", json={"allowCodeExecution": True})).raise_for_status()
        try:
            text = await b.text("browser_run_code_unsafe", code="async (page) => page.context().pages().length")
        finally:
            await client.patch("/api/settings/browser", json={"allowCodeExecution": False})
    return int(text.split("### Result", 1)[1].split("###", 1)[0].strip())


async def test_a_session_sees_selects_and_closes_only_its_own_tabs(stack: Stack, site: LoginSite) -> None:
    one, other = f"tabs-a-{uuid.uuid4().hex[:6]}", f"tabs-b-{uuid.uuid4().hex[:6]}"
    first, second, theirs = site.url("/login?tab=first"), site.url("/login?tab=second"), site.url("/framed?b=1")
    async with bridge(stack, one) as a, bridge(stack, other) as b:
        await a.op("browser_navigate", url=first)
        await b.op("browser_navigate", url=theirs)
        # The server's order is now [a's, b's, a's new one]: a numbers its own 0 and 1.
        opened = await a.text("browser_tabs", action="new", url=second)
        assert theirs not in opened
        assert await tabs_of(a) == [(0, False, first), (1, True, second)]
        assert await tabs_of(b) == [(0, True, theirs)]

        snapshot = await a.text("browser_snapshot")
        assert "### Open tabs" in snapshot and theirs not in snapshot
        assert f"- 1: (current) [Sign in]({second})" in snapshot

        await a.op("browser_tabs", action="select", index=0)
        assert f"Page URL: {first}" in await a.text("browser_snapshot")
        # b's calls run in b's tab whatever a selected.
        assert f"Page URL: {theirs}" in await b.text("browser_snapshot")
        await a.op("browser_tabs", action="select", index=1)
        assert f"Page URL: {second}" in await a.text("browser_snapshot")

        for action in ("select", "close"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await b.op("browser_tabs", action=action, index=1)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "tab 1 is not one of this session's 1 tab(s)" in (refused.value.details() or "")

        closed = await a.text("browser_tabs", action="close", index=0)
        assert first not in closed and theirs not in closed
        assert await tabs_of(a) == [(0, True, second)]
        assert f"Page URL: {second}" in await a.text("browser_snapshot")
        assert await tabs_of(b) == [(0, True, theirs)]

        # browser_close is the session's own: the server's would end every session's browser.
        closed_all = await a.text("browser_close")
        assert f"Page URL: {theirs}" in await b.text("browser_snapshot")
        assert await tabs_of(b) == [(0, True, theirs)]
        assert "Closed 1 tab(s) of this session." in closed_all


async def test_popups_belong_to_the_opening_session_and_close_with_it(stack: Stack, site: LoginSite) -> None:
    bystander = f"tabs-c-{uuid.uuid4().hex[:6]}"
    popups = site.url("/popups")
    async with stack.client() as client:
        session = await new_session(client)
        async with bridge(stack, session) as a, bridge(stack, bystander) as c:
            await c.op("browser_navigate", url=site.url("/login?bystander=1"))
            await a.op("browser_navigate", url=popups)
            # Other tests' sessions keep tabs in the same browser: count from here.
            before = await server_tab_count(stack, c)
            snapshot = await a.text("browser_snapshot")
            await a.op("browser_click", target=ref_of(snapshot, "link", "New tab link"))
            await a.op("browser_click", target=ref_of(snapshot, "button", "Open window"))
            # This one opens on a timer, while the bystander's call runs.
            await a.op("browser_click", target=ref_of(snapshot, "button", "Open later"))
            waited = await c.text("browser_wait_for", time=1)
            assert "via=" not in waited

            async def all_three() -> bool:
                return len(await tabs_of(a)) == 4

            await eventually(all_three, what="the timer's popup in the opener's tabs")
            listed = await tabs_of(a)
            assert listed[0] == (0, True, popups)
            assert {url.split("via=")[1] for _, _, url in listed[1:]} == {"link", "open", "timer"}
            assert [url for _, _, url in await tabs_of(c)] == [site.url("/login?bystander=1")]

            # The model selects a popup by its own index and works in it.
            index = next(i for i, _, url in listed if url.endswith("via=link"))
            await a.op("browser_tabs", action="select", index=index)
            assert "Page URL: " + site.url("/login?via=link") in await a.text("browser_snapshot")
            assert await server_tab_count(stack, c) == before + 3

            # Deleting the chat session closes its tab and its popups; the bystander keeps its own.
            assert (await client.delete(f"/api/sessions/{session}")).status_code in (200, 204)
            listed_sessions = (await client.get("/api/browser/sessions")).json()["sessions"]
            assert session not in [s["sessionId"] for s in listed_sessions]
            assert await server_tab_count(stack, c) == before - 1
            assert await tabs_of(c) == [(0, True, site.url("/login?bystander=1"))]


class _CatalogWithoutRunCode(BifrostClient):
    """The real server's catalog less browser_run_code_unsafe, as a server that does not offer it
    (every refresh too: the server announces list changes as pages change)."""

    async def _load_tools(self, session: ClientSession) -> None:
        await super()._load_tools(session)
        self.tools.pop(RUN_CODE, None)


async def test_a_server_without_run_code_gets_positional_tabs(peer: BrowserPeer, site: LoginSite) -> None:
    """Without browser_run_code_unsafe (no page tags): a tab that appears during a session's call
    is that session's, and the other session still sees only its own."""
    client = _CatalogWithoutRunCode(peer.socket_path, f"http://{SOCKET_HOST}/mcp", call_timeout_s=30, connect_wait_s=5)
    navigator = Navigator(client, SecretValues(None), BrowserGate(enabled=True))

    async def text(session_id: str, operation: str, **arguments: Any) -> str:
        outcome = await navigator.navigate(session_id, "interactive", operation, arguments)
        return "\n".join(part.text for part in outcome.parts)

    async def urls(session_id: str) -> list[str]:
        return [url for _, _, url in TAB.findall(await text(session_id, "browser_tabs", action="list"))]

    async with background_task(client.run, name="positional-client"):
        await client.session()
        assert RUN_CODE not in client.tools
        await text("a", "browser_navigate", url=site.url("/popups"))
        await text("b", "browser_navigate", url=site.url("/login?positional=b"))
        snapshot = await text("a", "browser_snapshot")
        await text("a", "browser_click", target=ref_of(snapshot, "link", "New tab link"))
        assert await urls("a") == [site.url("/popups"), site.url("/login?via=link")]
        assert await urls("b") == [site.url("/login?positional=b")]
        await text("b", "browser_tabs", action="new", url=site.url("/login?positional=b2"))
        assert await urls("b") == [site.url("/login?positional=b"), site.url("/login?positional=b2")]
        await text("a", "browser_tabs", action="select", index=1)
        assert "Page URL: " + site.url("/login?via=link") in await text("a", "browser_snapshot")
        assert len(await urls("a")) == 2
