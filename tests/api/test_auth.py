"""Auth over real HTTP: every route of this suite's resources refuses a missing or wrong key."""

from __future__ import annotations

import httpx
import pytest

from popagent_gateway.bounded import KEYLESS_API_PATHS
from support.stacks import API_KEY, Stack

ROUTES = [
    ("GET", "/api/models"),
    ("GET", "/api/sessions"),
    ("POST", "/api/sessions"),
    ("GET", "/api/sessions/s1"),
    ("PUT", "/api/sessions/s1"),
    ("PATCH", "/api/sessions/s1"),
    ("DELETE", "/api/sessions/s1"),
    ("GET", "/api/sessions/s1/export"),
    ("POST", "/api/sessions/s1/messages/m1/versions/1"),
    ("GET", "/api/search/messages?q=x"),
    ("GET", "/api/sessions/s1/memory"),
    ("POST", "/api/sessions/s1/turns/t1/cancel"),
    ("GET", "/api/sessions/s1/approval-grants"),
    ("POST", "/api/sessions/s1/attachments"),
    ("GET", "/api/sessions/s1/attachments"),
    ("GET", "/api/sessions/s1/attachments/att-00000000000000000000000000000000"),
    ("POST", "/api/sessions/s1/attachments/att-00000000000000000000000000000000/copy-to-workspace"),
    ("DELETE", "/api/sessions/s1/approval-grants/getTime"),
    ("GET", "/api/approvals"),
    ("POST", "/api/approvals/a1"),
    ("GET", "/api/settings/agent-runtime"),
    ("PATCH", "/api/settings/agent-runtime"),
    ("GET", "/api/settings/memory"),
    ("PATCH", "/api/settings/memory"),
    ("GET", "/api/settings/autonomy"),
    ("PATCH", "/api/settings/autonomy"),
    ("GET", "/api/settings/browser"),
    ("PATCH", "/api/settings/browser"),
    ("GET", "/api/browser/profiles"),
    ("POST", "/api/browser/profiles"),
    ("PUT", "/api/browser/profiles/work/policy"),
    ("DELETE", "/api/browser/profiles/work"),
    ("GET", "/api/browser/sessions/s1/profile"),
    ("PUT", "/api/browser/sessions/s1/profile"),
    ("DELETE", "/api/browser/sessions/s1/profile"),
    ("GET", "/api/browser/sessions/s1/recordings"),
    ("POST", "/api/browser/sessions/s1/input"),
    ("GET", "/api/browser/sessions/s1/recordings/1"),
    ("GET", "/api/agents"),
    ("PATCH", "/api/agents/researcher"),
    ("GET", "/api/agents/researcher/skills"),
    ("POST", "/api/agents/researcher/skills"),
    ("PATCH", "/api/agents/researcher/skills/k1"),
    ("DELETE", "/api/agents/researcher/skills/k1"),
    ("GET", "/api/workspaces"),
    ("POST", "/api/workspaces"),
    ("PATCH", "/api/workspaces/popagent"),
    ("DELETE", "/api/workspaces/popagent"),
    ("DELETE", "/api/workspaces/popagent/sessions"),
    ("GET", "/api/workspaces/popagent/documents"),
    ("POST", "/api/workspaces/popagent/documents"),
    ("GET", "/api/workspaces/popagent/documents/d1"),
    ("PATCH", "/api/workspaces/popagent/documents/d1"),
    ("DELETE", "/api/workspaces/popagent/documents/d1"),
    ("GET", "/api/workspaces/popagent/documents/index"),
    ("POST", "/api/workspaces/popagent/documents/index"),
    ("POST", "/api/workspaces/popagent/documents/search"),
    ("GET", "/api/mcp-servers"),
    ("POST", "/api/mcp-servers"),
    ("GET", "/api/mcp-servers/m1"),
    ("PATCH", "/api/mcp-servers/m1"),
    ("DELETE", "/api/mcp-servers/m1"),
    ("POST", "/api/mcp-servers/m1/test"),
    ("GET", "/api/self-update"),
    ("GET", "/api/self-update/attempts/t1-1/diff"),
    ("DELETE", "/api/self-update/attempts/t1-1/ref"),
    ("POST", "/api/mcp-servers/m1/oauth/start"),
    ("GET", "/api/channels"),
    ("POST", "/api/channels"),
    ("GET", "/api/channels/chn-00000000000000000000000000000000"),
    ("PATCH", "/api/channels/chn-00000000000000000000000000000000"),
    ("DELETE", "/api/channels/chn-00000000000000000000000000000000"),
    ("GET", "/api/channels/chn-00000000000000000000000000000000/history"),
    ("POST", "/api/channels/chn-00000000000000000000000000000000/post"),
    ("POST", "/api/channels/chn-00000000000000000000000000000000/turns/t1/cancel"),
]
BAD_KEYS = [{}, {"x-popagent-key": ""}, {"x-popagent-key": API_KEY[:-1]}, {"x-popagent-key": API_KEY.upper()}]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_missing_or_wrong_keys_are_refused_before_anything_runs(api_stack: Stack, method: str, path: str) -> None:
    async with httpx.AsyncClient(base_url=api_stack.url) as client:
        for headers in BAD_KEYS:
            response = await client.request(method, path, headers=headers, json={"displayName": "x"})
            assert response.status_code == 401, (method, path, headers)
            assert response.json() == {"error": "missing or wrong x-popagent-key"}
    # Nothing the refused requests carried was applied.
    async with api_stack.client() as client:
        agents = (await client.get("/api/agents")).json()["agents"]
        assert "x" not in {agent["displayName"] for agent in agents}


async def test_the_key_is_checked_before_the_body_is_parsed(api_stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=api_stack.url) as client:
        for body in (b"{not json", b"\xff\xfe", b"[1, 2]"):
            response = await client.put("/api/sessions/s1", content=body, headers={"content-type": "application/json"})
            assert response.status_code == 401, (body, response.text)


def test_the_inventory_above_covers_every_route_of_these_resources() -> None:
    from popagent_gateway.openapi import document

    covered = {(m, p.replace("s1", "{session_id}").replace("researcher", "{agent_id}")) for m, p in ROUTES}
    covered = {(m, p.replace("/skills/k1", "/skills/{skill_id}")) for m, p in covered}
    covered = {(m, p.replace("/turns/t1", "/turns/{turn_id}")) for m, p in covered}
    covered = {(m, p.replace("/api/workspaces/popagent", "/api/workspaces/{workspace_id}")) for m, p in covered}
    covered = {(m, p.replace("/documents/d1", "/documents/{document_id}")) for m, p in covered}
    covered = {(m, p.replace("/approval-grants/getTime", "/approval-grants/{tool_name}")) for m, p in covered}
    covered = {(m, p.replace("/api/approvals/a1", "/api/approvals/{approval_id}")) for m, p in covered}
    covered = {(m, p.replace("/profiles/work", "/profiles/{name}")) for m, p in covered}
    covered = {(m, p.replace("/recordings/1", "/recordings/{seq}")) for m, p in covered}
    covered = {
        (m, p.replace("/messages/m1/versions/1", "/messages/{message_id}/versions/{version}")) for m, p in covered
    }
    covered = {(m, p.replace("/api/mcp-servers/m1", "/api/mcp-servers/{server_id}")) for m, p in covered}
    channel = "/api/channels/chn-00000000000000000000000000000000"
    covered = {(m, p.replace(channel, "/api/channels/{channel_id}")) for m, p in covered}
    attachment = "/attachments/att-00000000000000000000000000000000"
    covered = {(m, p.replace(attachment, "/attachments/{attachment_id}")) for m, p in covered}
    covered = {(m, p.replace("/attempts/t1-1", "/attempts/{attempt_id}")) for m, p in covered}
    covered = {(m, p.split("?", 1)[0]) for m, p in covered}
    paths = document()["paths"]
    assert isinstance(paths, dict)
    mine = (
        "/api/models",
        "/api/sessions",
        "/api/search",
        "/api/settings",
        "/api/agents",
        "/api/workspaces",
        "/api/approvals",
        "/api/browser/profiles",
        "/api/browser/sessions/{session_id}/profile",
        "/api/browser/sessions/{session_id}/recordings",
        "/api/browser/sessions/{session_id}/input",
        "/api/mcp-servers",
        "/api/self-update",
        "/api/channels",
    )
    # A channel's webhook is signed by its platform instead (tests/channels: 401 without the signature).
    expected = {
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith(mine) and not path.endswith(("/hooks", "/events")) and path not in KEYLESS
        for method in operations
    }
    assert expected == covered
    # The documented exceptions are routes, and only those.
    assert set(paths) >= KEYLESS and KEYLESS == KEYLESS_API_PATHS


# /api routes a browser redirect reaches without the key, each authorized by what it carries
# (bounded.KEYLESS_API_PATHS): the MCP OAuth callback, by the single-use state its start issued.
KEYLESS = frozenset({"/api/mcp-servers/oauth/callback"})


async def test_the_mcp_oauth_callback_takes_no_key_and_refuses_a_state_it_did_not_issue(api_stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=api_stack.url) as browser:
        for headers in BAD_KEYS:
            response = await browser.get(
                "/api/mcp-servers/oauth/callback", params={"state": "s" * 43, "code": "c"}, headers=headers
            )
            assert response.status_code == 400, response.text
            assert "not one this server issued" in response.text
