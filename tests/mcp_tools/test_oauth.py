"""Users' MCP servers behind OAuth 2.1 (docs/interop.md, "OAuth servers"), against a real protected
server whose authorization server is the `mcp` SDK's (`oauth_peer.py`), over real HTTP: a server added
with `auth: oauth` is connected by /oauth/start and the browser's way through the authorization server
back to the gateway's callback (protected resource and authorization server discovery, dynamic client
registration, PKCE S256, the `resource` indicator); a turn's call of its tool carries the token; an
access token is refreshed before it expires and when the server refuses it; a refused refresh makes
the tool say that the server needs connecting again, at once; a forged, replayed or expired state is
refused and stores nothing; no token and no client secret shows in an answer, a log record or a table."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import orjson
import pytest
from chat.helpers import chat, new_session, text_of

from mcp_tools.harness import added_server, authorize_in_browser, serving_oauth_peer, tool_results
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

CALLBACK = "/api/mcp-servers/oauth/callback"
# POPAGENT_MCP_CALL_TIMEOUT_S and POPAGENT_MCP_CONNECT_WAIT_S of the stack (support/stacks.py MCP_TOOLS_STACK).
CALL_TIMEOUT_S = 4.0
CONNECT_WAIT_S = 3.0


async def connect(client: httpx.AsyncClient, server_id: str, answers: list[str] | None = None) -> httpx.Response:
    started = await client.post(f"/api/mcp-servers/{server_id}/oauth/start")
    assert started.status_code == 200, started.text
    callback = await authorize_in_browser(started.json()["authorizationUrl"])
    if answers is not None:
        answers.extend([started.text, callback.text])
    return callback


async def oauth_secrets(client: httpx.AsyncClient) -> list[str]:
    listed = await client.get("/api/secrets", params={"resourceId": "mcp-servers"})
    return sorted(secret["name"] for secret in listed.json()["secrets"])


async def whoami_turn(stack: Stack, client: httpx.AsyncClient, call_id: str) -> tuple[list[dict[str, Any]], str]:
    """A turn whose model calls the server's tool once; the chunks and the tool's result."""
    before = len(stack.models.requests)
    stack.models.push(Turn.call(ToolCall("mcp__secured__whoami", {}, id=call_id)), Turn.say("Done."))
    chunks = await chat(client, await new_session(client), "who am I?")
    [result] = tool_results(stack.models.requests[before + 1])
    return chunks, result


async def everything_stored(stack: Stack) -> str:
    """Every row of every table of agent-runner's and the secrets service's schemas, as text."""
    dump: list[str] = []
    async with stack.db() as conn:
        schemas = await conn.fetch(
            "SELECT DISTINCT table_schema FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        for schema in schemas:
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'",
                schema["table_schema"],
            )
            for table in tables:
                rows = await conn.fetch(
                    f'SELECT t::text AS row FROM "{schema["table_schema"]}"."{table["table_name"]}" t'
                )
                dump.extend(row["row"] for row in rows)
    return "\n".join(dump)


async def test_an_oauth_server_is_connected_through_the_browser_and_its_tool_called_with_the_token(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[str] = []
    async with (
        stack.client() as client,
        serving_oauth_peer() as peer,
        added_server(client, name="secured", transport="http", url=peer.url, auth="oauth") as server,
    ):
        answers.append(orjson.dumps(server).decode())
        assert server["auth"] == "oauth" and server["tokenSet"] is False
        assert server["oauth"] == {"connected": False, "expiresAt": None, "error": ""}
        started = await client.post(f"/api/mcp-servers/{server['id']}/oauth/start")
        assert started.status_code == 200, started.text
        answers.append(started.text)
        query = parse_qs(urlparse(started.json()["authorizationUrl"]).query)
        assert query["response_type"] == ["code"] and query["code_challenge_method"] == ["S256"]
        assert query["resource"] == [peer.url] and query["scope"] == ["tools"]
        assert query["redirect_uri"] == [f"{stack.url}{CALLBACK}"]
        # The client was registered dynamically with the server's authorization server and kept.
        assert await oauth_secrets(client) == [f"{server['id']}.oauth-client"]
        callback = await authorize_in_browser(started.json()["authorizationUrl"])
        answers.append(callback.text)
        assert callback.status_code == 200, callback.text
        assert "Connected secured" in callback.text and "window.close" in callback.text
        assert "script-src 'sha256-" in callback.headers["content-security-policy"]
        got = (await client.get(f"/api/mcp-servers/{server['id']}")).json()
        answers.append(orjson.dumps(got).decode())
        assert got["oauth"]["connected"] is True and got["oauth"]["error"] == ""
        assert datetime.fromisoformat(got["oauth"]["expiresAt"]).timestamp() > time.time() + 3000
        assert await oauth_secrets(client) == [f"{server['id']}.oauth-client", f"{server['id']}.oauth-tokens"]

        tested = await client.post(f"/api/mcp-servers/{server['id']}/test")
        answers.append(tested.text)
        assert tested.json()["ok"] is True and [t["modelName"] for t in tested.json()["tools"]] == [
            "mcp__secured__whoami"
        ]
        chunks, result = await whoami_turn(stack, client, "w1")
        answers.append(orjson.dumps(chunks).decode())
        assert text_of(chunks) == "Done."
        assert "called by client" in result and "for alice" in result, result
        stats = await peer.stats()
        assert (stats["registered"], stats["exchanged"]) == (1, 1)
        # The tokens were asked for the MCP endpoint as the resource (RFC 8707), and the server (which
        # refuses tokens bound to another resource) took them.
        assert stats["resources"] == [peer.url]
        answers.append((await client.get("/api/mcp-servers")).text)
        issued = await peer.issued()
    # Every access and refresh token the authorization server issued, and the client secret.
    assert len(issued) >= 3 and all(len(value) >= 16 for value in issued)
    stored = await everything_stored(stack)
    logged = caplog.text + "\n".join(str(record.__dict__) for record in caplog.records)
    for value in issued:
        assert all(value not in answer for answer in answers), "a token or client secret is in an API answer"
        assert value not in logged, "a token or client secret is in a log record"
        assert value not in stored, "a token or client secret is in a table"


async def test_an_access_token_is_refreshed_before_it_expires_and_when_the_server_refuses_it(stack: Stack) -> None:
    async with (
        stack.client() as client,
        serving_oauth_peer() as peer,
        added_server(client, name="secured", transport="http", url=peer.url, auth="oauth") as server,
    ):
        # Tokens that live two seconds: refreshed half a second before they expire.
        await peer.control("lifetime", seconds=2)
        assert (await connect(client, server["id"])).status_code == 200
        expires_at = (await client.get(f"/api/mcp-servers/{server['id']}")).json()["oauth"]["expiresAt"]

        async def expired() -> bool:
            return time.time() > datetime.fromisoformat(expires_at).timestamp()

        await eventually(expired, within=10, what="the access token to expire")
        refused_before = (await peer.stats())["unauthorized"]
        await peer.control("lifetime", seconds=3600)
        _, result = await whoami_turn(stack, client, "r1")
        assert "called by client" in result, result
        stats = await peer.stats()
        # Refreshed before it was used: the server never saw the expired token.
        assert stats["refreshed"] >= 1 and stats["unauthorized"] == refused_before
        later = (await client.get(f"/api/mcp-servers/{server['id']}")).json()["oauth"]
        assert later["connected"] is True and later["expiresAt"] != expires_at

        # The server stops taking the token it holds: a 401, answered by a refresh and a retry.
        await peer.control("expire")
        refreshed_before = (await peer.stats())["refreshed"]
        _, result = await whoami_turn(stack, client, "r2")
        assert "called by client" in result, result
        stats = await peer.stats()
        assert stats["refreshed"] == refreshed_before + 1 and stats["unauthorized"] > refused_before


async def test_a_refused_refresh_makes_the_tools_say_reconnect_needed_until_the_server_is_connected_again(
    stack: Stack,
) -> None:
    async with (
        stack.client() as client,
        serving_oauth_peer() as peer,
        added_server(client, name="secured", transport="http", url=peer.url, auth="oauth") as server,
    ):
        await connect(client, server["id"])
        _, result = await whoami_turn(stack, client, "x1")
        assert "called by client" in result, result
        await peer.control("revoke")
        began = time.monotonic()
        _, result = await whoami_turn(stack, client, "x2")
        took = time.monotonic() - began
        assert "reconnect needed" in result and "connect MCP server secured again" in result, result
        assert took < CALL_TIMEOUT_S + CONNECT_WAIT_S + 5, took
        oauth = (await client.get(f"/api/mcp-servers/{server['id']}")).json()["oauth"]
        assert oauth["connected"] is False and "refused" in oauth["error"], oauth
        assert await oauth_secrets(client) == [f"{server['id']}.oauth-client"]
        # Another turn says so without waiting for a connection.
        began = time.monotonic()
        _, result = await whoami_turn(stack, client, "x3")
        assert "reconnect needed" in result and time.monotonic() - began < CONNECT_WAIT_S + 5, result
        # Connected again (the kept client, no new registration), the tool works.
        assert (await connect(client, server["id"])).status_code == 200
        _, result = await whoami_turn(stack, client, "x4")
        assert "called by client" in result, result
        assert (await peer.stats())["registered"] == 1


async def test_a_forged_replayed_expired_or_refused_state_is_refused_and_nothing_is_stored(stack: Stack) -> None:
    async with (
        stack.client() as client,
        serving_oauth_peer() as peer,
        added_server(client, name="secured", transport="http", url=peer.url, auth="oauth") as server,
        httpx.AsyncClient(base_url=stack.url) as browser,
    ):
        client_only = [f"{server['id']}.oauth-client"]

        async def not_connected() -> None:
            assert (await client.get(f"/api/mcp-servers/{server['id']}")).json()["oauth"]["connected"] is False
            assert await oauth_secrets(client) == client_only

        started = (await client.post(f"/api/mcp-servers/{server['id']}/oauth/start")).json()
        state = parse_qs(urlparse(started["authorizationUrl"]).query)["state"][0]
        # Forged: a state the gateway never issued, even with a code the authorization server would take.
        forged = await browser.get(CALLBACK, params={"state": "forged-" + state[7:], "code": "x"})
        assert forged.status_code == 400 and "not one this server issued" in forged.text, forged.text
        assert "text/html" in forged.headers["content-type"]
        await not_connected()
        # The authorization server's own refusal: the state is used up with it.
        denied = await browser.get(CALLBACK, params={"state": state, "error": "access_denied"})
        assert denied.status_code == 400 and "access_denied" in denied.text
        await not_connected()

        # Expired: the start is older than its lifetime.
        started = (await client.post(f"/api/mcp-servers/{server['id']}/oauth/start")).json()
        async with stack.db() as conn:
            await conn.execute("UPDATE agent_runner.popagent_mcp_oauth_starts SET expires_at = now() - interval '1 s'")
        late = await authorize_in_browser(started["authorizationUrl"])
        assert late.status_code == 400 and "expired" in late.text, late.text
        await not_connected()
        assert (await peer.stats())["exchanged"] == 0

        # Replayed: the callback a browser already brought back, brought again.
        started = (await client.post(f"/api/mcp-servers/{server['id']}/oauth/start")).json()
        async with httpx.AsyncClient(follow_redirects=False) as user:
            approved = await user.get(started["authorizationUrl"])
            back = approved.headers["location"]
            assert (await user.get(back)).status_code == 200
            again = await user.get(back)
        assert again.status_code == 400 and "used already" in again.text, again.text
        assert (await peer.stats())["exchanged"] == 1
        # A server without OAuth has nothing to start.
        async with added_server(client, name="plain", transport="http", url=peer.url) as plain:
            refused = await client.post(f"/api/mcp-servers/{plain['id']}/oauth/start")
            assert refused.status_code == 409 and "does not use OAuth" in refused.text


async def test_an_oauth_server_takes_no_token_and_a_new_url_drops_its_tokens(stack: Stack) -> None:
    async with (
        stack.client() as client,
        serving_oauth_peer() as peer,
        added_server(client, name="secured", transport="http", url=peer.url, auth="oauth") as server,
    ):
        with_token = await client.post(
            "/api/mcp-servers",
            json={"name": "both", "transport": "http", "url": peer.url, "auth": "oauth", "token": "t"},
        )
        assert with_token.status_code == 422, with_token.text
        patched = await client.patch(f"/api/mcp-servers/{server['id']}", json={"token": "t"})
        assert patched.status_code == 400 and "takes no token" in patched.text, patched.text
        await connect(client, server["id"])
        moved = await client.patch(f"/api/mcp-servers/{server['id']}", json={"url": peer.url + "/"})
        assert moved.status_code == 200, moved.text
        assert moved.json()["oauth"] == {"connected": False, "expiresAt": None, "error": ""}
        assert await oauth_secrets(client) == []
