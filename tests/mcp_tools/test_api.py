"""/api/mcp-servers on the real stack: servers are stored by agent-runner, their bearer tokens in the
secrets service, and no route ever returns a token; bad input gets a 4xx saying what is wrong."""

from __future__ import annotations

import uuid

from mcp_tools.harness import STDIO_SERVER, added_server, serving_peer
from support.stacks import Stack

TOKEN = "peer-token-" + uuid.uuid4().hex


async def test_a_server_is_created_listed_changed_tested_and_deleted_and_its_token_never_shown(stack: Stack) -> None:
    answers: list[str] = []
    async with stack.client() as client, serving_peer(TOKEN) as peer:
        body = {"name": "remote", "transport": "http", "url": peer.url, "token": TOKEN}
        async with added_server(client, **body) as server:
            assert server["tokenSet"] is True and server["transport"] == "http" and server["url"] == peer.url
            assert server["agents"] == {"popagent": {"tools": []}}
            listed = await client.get("/api/mcp-servers")
            fetched = await client.get(f"/api/mcp-servers/{server['id']}")
            assert [s["id"] for s in listed.json()["servers"]] == [server["id"]]
            assert fetched.json() == server
            # The token is in the secrets service, under the server's id, and nowhere else.
            secrets = await client.get("/api/secrets", params={"resourceId": "mcp-servers"})
            assert [s["name"] for s in secrets.json()["secrets"]] == [server["id"]]
            async with stack.db() as conn:
                row = await conn.fetchrow("SELECT * FROM popagent_mcp_servers WHERE id = $1", server["id"])
            assert row is not None and TOKEN not in str(dict(row))
            tested = await client.post(f"/api/mcp-servers/{server['id']}/test")
            assert tested.status_code == 200, tested.text
            result = tested.json()
            assert result["ok"] is True and result["serverName"] == "peer-server", result
            assert {tool["name"]: tool["modelName"] for tool in result["tools"]}["echo"] == "mcp__remote__echo"
            # A wrong token: the test says the server refused.
            patched = await client.patch(f"/api/mcp-servers/{server['id']}", json={"token": "wrong"})
            assert patched.status_code == 200 and patched.json()["tokenSet"] is True
            refused = (await client.post(f"/api/mcp-servers/{server['id']}/test")).json()
            assert refused["ok"] is False and "401" in refused["error"], refused
            # Removing the token removes the secret.
            cleared = await client.patch(
                f"/api/mcp-servers/{server['id']}", json={"token": "", "agents": {}, "enabled": False}
            )
            assert cleared.json()["tokenSet"] is False and cleared.json()["agents"] == {}
            assert cleared.json()["enabled"] is False
            gone = await client.get("/api/secrets", params={"resourceId": "mcp-servers"})
            assert gone.json()["secrets"] == []
            answers += [listed.text, fetched.text, tested.text, patched.text, cleared.text]
        assert (await client.get(f"/api/mcp-servers/{server['id']}")).status_code == 404
        assert (await client.get("/api/mcp-servers")).json()["servers"] == []
        for text in [*answers, str(server)]:
            assert TOKEN not in text and "wrong" not in text


async def test_deleting_a_server_deletes_its_token(stack: Stack) -> None:
    async with stack.client() as client:
        async with added_server(client, name="doomed", transport="http", url="http://127.0.0.1:9/mcp", token=TOKEN):
            listed = await client.get("/api/secrets", params={"resourceId": "mcp-servers"})
            assert len(listed.json()["secrets"]) == 1
        listed = await client.get("/api/secrets", params={"resourceId": "mcp-servers"})
        assert listed.json()["secrets"] == []


async def test_bad_servers_are_refused_with_the_reason(stack: Stack) -> None:
    async with stack.client() as client:
        cases = [
            ({"name": "Bad-Name", "transport": "http", "url": "http://127.0.0.1:9/mcp"}, 422, "name"),
            ({"name": "two__parts", "transport": "http", "url": "http://127.0.0.1:9/mcp"}, 422, "name"),
            ({"name": "nourl", "transport": "http"}, 422, "url"),
            ({"name": "nocmd", "transport": "stdio"}, 422, "command"),
            ({"name": "mixed", "transport": "stdio", "command": "python", "url": "http://x/mcp"}, 422, "url"),
            ({"name": "tok", "transport": "stdio", "command": "python", "token": "t"}, 422, "token"),
            ({"name": "sp", "transport": "http", "url": "http://x/mcp", "token": "a b"}, 422, "token"),
            (
                {"name": "net", "transport": "stdio", "command": "python", "allowedHosts": ["example.com"]},
                422,
                "allowedHosts is not supported",
            ),
            (
                {"name": "who", "transport": "http", "url": "http://127.0.0.1:9/mcp", "agents": {"nobody": {}}},
                404,
                "no agent 'nobody'",
            ),
        ]
        for body, status, reason in cases:
            answer = await client.post("/api/mcp-servers", json=body)
            assert answer.status_code == status, (body, answer.text)
            assert reason in answer.text, (body, answer.text)
        async with added_server(
            client, name="local", transport="stdio", command="python", args=["-c", STDIO_SERVER]
        ) as made:
            # Checked against the stored server: a url or a token for a stdio server, a transport without its field.
            for patch, reason in (
                ({"url": "http://127.0.0.1:9/mcp"}, "url is for http servers"),
                ({"token": "abc"}, "a token is for http servers"),
                ({"transport": "http"}, "url is required"),
            ):
                refused = await client.patch(f"/api/mcp-servers/{made['id']}", json=patch)
                assert refused.status_code == 400 and reason in refused.text, (patch, refused.text)
            again = await client.post("/api/mcp-servers", json={"name": "local", "transport": "stdio", "command": "x"})
            assert again.status_code == 409 and "named 'local'" in again.text
        assert (await client.get("/api/mcp-servers/mcp-" + "0" * 32)).status_code == 404
        assert (await client.get("/api/mcp-servers/not-an-id")).status_code == 422
        assert (await client.get("/api/mcp-servers")).json()["servers"] == []
