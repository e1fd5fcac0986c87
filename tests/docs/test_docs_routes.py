"""The documents routes over real HTTP: added documents, refusals with their reason, and searchDocs in a chat turn."""

from __future__ import annotations

import pytest
from chat.helpers import chat, of_type, text_of

from docs.docs_support import index_and_wait, register_workspace, search
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack


async def test_an_added_document_is_searchable_at_once_and_can_be_changed_and_deleted(stack: Stack) -> None:
    (stack.workspace_root / "api-docs").mkdir()
    async with stack.client() as client:
        await register_workspace(client, "api-docs", "api-docs")
        created = await client.post(
            "/api/workspaces/api-docs/documents",
            json={"path": "runbooks/backup.md", "content": "# Backup\n\n## Restore\n\nRestore with pg_restore."},
        )
        assert created.status_code == 201, created.text
        document = created.json()
        assert (document["origin"], document["title"], document["indexed"]) == ("api", "backup.md", True)
        assert document["content"].startswith("# Backup") and document["chunkCount"] == 2

        [hit, *_] = (await search(client, "api-docs", "how do I restore with pg_restore"))["hits"]
        assert (hit["path"], hit["headingPath"], hit["documentId"]) == (
            "runbooks/backup.md",
            ["Backup", "Restore"],
            document["id"],
        )

        url = f"/api/workspaces/api-docs/documents/{document['id']}"
        patched = await client.patch(
            url, json={"content": "# Backup\n\nSnapshots are taken nightly.", "title": "Backups"}
        )
        assert patched.status_code == 200 and patched.json()["title"] == "Backups"
        hits = (await search(client, "api-docs", "nightly snapshots"))["hits"]
        assert [h["content"] for h in hits] == ["Snapshots are taken nightly."]

        assert (await client.get(url)).json()["content"] == "# Backup\n\nSnapshots are taken nightly."
        listed = (await client.get("/api/workspaces/api-docs/documents", params={"pathPrefix": "runbooks/"})).json()
        assert [d["path"] for d in listed["documents"]] == ["runbooks/backup.md"]
        assert listed["documents"][0]["content"] is None
        assert (await client.delete(url)).status_code == 204
        assert (await client.get(url)).status_code == 404
        assert (await search(client, "api-docs", "nightly snapshots"))["hits"] == []


async def test_a_file_document_is_refused_to_patch_and_delete_with_the_reason(stack: Stack) -> None:
    (stack.workspace_root / "file-docs").mkdir()
    (stack.workspace_root / "file-docs" / "guide.md").write_text("# Guide\n\nHello.\n")
    async with stack.client() as client:
        await register_workspace(client, "file-docs", "file-docs")
        await index_and_wait(client, "file-docs")
        [document] = (await client.get("/api/workspaces/file-docs/documents")).json()["documents"]
        url = f"/api/workspaces/file-docs/documents/{document['id']}"
        patched = await client.patch(url, json={"content": "# Changed"})
        deleted = await client.delete(url)
        duplicate = await client.post("/api/workspaces/file-docs/documents", json={"path": "guide.md", "content": "x"})
        other = await client.get(url.replace("file-docs/documents", "popagent/documents"))
    assert patched.status_code == 409 and "workspace file 'guide.md'" in patched.json()["error"]
    assert deleted.status_code == 409 and "exclude globs" in deleted.json()["error"]
    assert duplicate.status_code == 409 and "already has a document at 'guide.md'" in duplicate.json()["error"]
    # Another workspace does not see it, even by id.
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("post", "/api/workspaces/nowhere/documents/index", None, 404, "workspace 'nowhere' not found"),
        ("get", "/api/workspaces/nowhere/documents", None, 404, "not found"),
        ("post", "/api/workspaces/popagent/documents/search", {"query": ""}, 422, "query"),
        ("post", "/api/workspaces/popagent/documents/search", {"query": "x", "k": 51}, 422, "k"),
        ("post", "/api/workspaces/popagent/documents/search", {"query": "x", "top": 3}, 422, "top"),
        # The document's path pattern refuses these at the gateway, naming the field.
        ("post", "/api/workspaces/popagent/documents", {"path": "../escape.md", "content": "x"}, 422, '"path"'),
        ("post", "/api/workspaces/popagent/documents", {"path": "/etc/passwd", "content": "x"}, 422, '"path"'),
        ("post", "/api/workspaces/popagent/documents", {"path": "a.md", "content": ""}, 422, "content"),
        ("post", "/api/workspaces/popagent/documents/index", {"include": []}, 422, "include"),
        ("post", "/api/workspaces/popagent/documents/index", {"include": ["../**/*.md"]}, 422, '"include"'),
        ("patch", f"/api/workspaces/popagent/documents/doc_{'0' * 32}", {"title": "x"}, 404, f"doc_{'0' * 32}"),
        ("patch", f"/api/workspaces/popagent/documents/doc_{'0' * 32}", {}, 422, ""),
        # No document id has this shape: no route, rather than a lookup.
        ("patch", "/api/workspaces/popagent/documents/doc_missing", {"title": "x"}, 404, "Not Found"),
        ("get", "/api/workspaces/Bad_Id/documents", None, 422, "workspace_id"),
    ],
)
async def test_bad_input_is_a_4xx_with_its_reason(stack: Stack, method, path, body, status, reason) -> None:
    async with stack.client() as client:
        response = await client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert reason in response.text


async def test_the_supervisor_calls_search_docs_on_its_session_workspace(stack: Stack) -> None:
    (stack.workspace_root / "chat-docs").mkdir()
    (stack.workspace_root / "chat-docs" / "deploy.md").write_text(
        "# Deploy\n\n## Rollback\n\nRoll back with `make rollback VERSION=…`.\n"
    )
    stack.models.push(
        Turn.call(ToolCall("searchDocs", {"query": "how do I roll back a deploy", "k": 3}, id="call-d")),
        Turn.say("Run make rollback [deploy.md > Rollback].", chunk_size=100),
    )
    async with stack.client() as client:
        await register_workspace(client, "chat-docs", "chat-docs")
        await index_and_wait(client, "chat-docs")
        created = await client.post("/api/sessions", json={"title": "docs", "workspaceId": "chat-docs"})
        chunks = await chat(client, created.json()["id"], "how do I roll back?")
    [output] = of_type(chunks, "tool-output-available")
    assert output["output"]["workspace"] == "chat-docs"
    [first, *_] = output["output"]["results"]
    assert (first["path"], first["headingPath"]) == ("deploy.md", ["Deploy", "Rollback"])
    assert "make rollback" in first["text"]
    assert "make rollback" in stack.models.requests[1]["messages"][-1]["content"]
    assert text_of(chunks) == "Run make rollback [deploy.md > Rollback]."
    # The tool is offered to the model as the registry key.
    offered = {tool["function"]["name"] for tool in stack.models.requests[0]["tools"]}
    assert "searchDocs" in offered
