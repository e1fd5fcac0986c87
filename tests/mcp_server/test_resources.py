"""popagent's MCP resources with the official MCP Python client: the registered workspaces' documents
(listed page by page, read by URI) and session transcripts, at both revisions the SDK speaks."""

from __future__ import annotations

import base64
import os
import uuid

import pytest
from docs.docs_support import index_and_wait, register_workspace
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PaginatedRequestParams, Resource, TextResourceContents

from mcp_server.helpers import BEARER, HANDSHAKE, MODERN, connected
from support.stacks import Stack

PAGE = 100  # mcp_server.RESOURCES_PAGE
FILES = 130  # more than a page: the listing goes on past a page's end inside one workspace


async def listed_in_pages(session: ClientSession) -> list[list[Resource]]:
    """Every page of resources/list, following nextCursor to its end."""
    pages: list[list[Resource]] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_resources(params=params)
        pages.append(page.resources)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor
        assert len(pages) < 100, "resources/list does not come to an end"


async def test_workspace_documents_are_listed_page_by_page_and_read_by_uri(stack: Stack) -> None:
    workspace = f"mcp-docs-{uuid.uuid4().hex[:8]}"
    root = stack.workspace_root / workspace
    (root / "guide").mkdir(parents=True)
    for n in range(FILES):
        (root / "guide" / f"page-{n:03}.md").write_text(f"# Page {n}\n\nHow to do step {n}.\n")
    # What the index never takes, so no resource shows: .git, what .gitignore ignores, a link out.
    (root / ".git").mkdir()
    (root / ".git" / "notes.md").write_text("# Git internals\n")
    (root / ".gitignore").write_text("private/\n")
    (root / "private").mkdir()
    (root / "private" / "secret.md").write_text("# Secret\n\nNot for the index.\n")
    outside = stack.workspace_root / f"outside-{workspace}.md"
    outside.write_text("# Outside\n\nA file out of the workspace.\n")
    os.symlink(outside, root / "linked.md")
    async with stack.client() as client:
        await register_workspace(client, workspace, workspace)
        indexed = await index_and_wait(client, workspace)
        assert (indexed["state"], indexed["documents"]) == ("idle", FILES), indexed
        added = await client.post(
            f"/api/workspaces/{workspace}/documents",
            json={"path": "runbooks/restore.md", "content": "# Restore\n\nRestore with pg_restore."},
        )
        assert added.status_code == 201, added.text
        [guide_page] = (
            await client.get(f"/api/workspaces/{workspace}/documents", params={"pathPrefix": "guide/page-042.md"})
        ).json()["documents"]

    expected = {f"guide/page-{n:03}.md" for n in range(FILES)} | {"runbooks/restore.md"}
    for revision in (HANDSHAKE, MODERN):
        async with connected(stack, BEARER, revision) as session:
            pages = await listed_in_pages(session)
            assert len(pages) >= 2, [len(page) for page in pages]
            assert all(len(page) <= PAGE for page in pages)
            resources = [resource for page in pages for resource in page]
            uris = [str(resource.uri) for resource in resources]
            assert len(uris) == len(set(uris)), "a document listed twice"
            mine = {
                resource.name: resource
                for resource in resources
                if str(resource.uri).startswith(f"popagent://workspaces/{workspace}/documents/")
            }
            assert set(mine) == expected
            page_42 = mine["guide/page-042.md"]
            assert str(page_42.uri) == f"popagent://workspaces/{workspace}/documents/{guide_page['id']}"
            assert (page_42.title, page_42.mime_type) == ("Page 42", "text/markdown")

            [content] = (await session.read_resource(str(page_42.uri))).contents
            assert isinstance(content, TextResourceContents)
            assert (content.text, content.mime_type) == ("# Page 42\n\nHow to do step 42.\n", "text/markdown")
            [restore] = (await session.read_resource(str(mine["runbooks/restore.md"].uri))).contents
            assert getattr(restore, "text", None) == "# Restore\n\nRestore with pg_restore."

            templates = {
                template.uri_template for template in (await session.list_resource_templates()).resource_templates
            }
            assert templates == {
                "popagent://sessions/{session_id}",
                "popagent://workspaces/{workspace_id}/documents/{document_id}",
            }


@pytest.mark.parametrize(
    "uri",
    [
        # Another workspace's document is not reachable through this one, even by its id.
        "popagent://workspaces/popagent/documents/{id}",
        "popagent://workspaces/{workspace}/documents/doc_00000000000000000000000000000000",
        "popagent://workspaces/no-such-workspace/documents/{id}",
        "popagent://workspaces/{workspace}/documents/..%2F..%2Fetc%2Fpasswd",
        "popagent://workspaces/{workspace}/documents/{id}.md",
    ],
)
async def test_a_document_uri_that_names_no_document_of_that_workspace_is_refused(stack: Stack, uri: str) -> None:
    workspace = f"mcp-refuse-{uuid.uuid4().hex[:8]}"
    (stack.workspace_root / workspace).mkdir()
    async with stack.client() as client:
        await register_workspace(client, workspace, workspace)
        added = await client.post(f"/api/workspaces/{workspace}/documents", json={"path": "a.md", "content": "# A"})
        assert added.status_code == 201, added.text
    async with connected(stack, BEARER, MODERN) as session:
        [content] = (
            await session.read_resource(f"popagent://workspaces/{workspace}/documents/{added.json()['id']}")
        ).contents
        assert getattr(content, "text", None) == "# A"
        with pytest.raises(MCPError) as refused:
            await session.read_resource(uri.format(workspace=workspace, id=added.json()["id"]))
    assert refused.value.code == INVALID_PARAMS, refused.value
    # Refused by popagent (not found), or by the SDK before it (a parameter that is no safe path segment).
    assert any(words in refused.value.message for words in ("not found", "no document", "Unknown resource"))


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64 !",
        base64.urlsafe_b64encode(b'{"workspace": 1}').decode(),
        base64.urlsafe_b64encode(b"[]").decode(),
        "A" * 4000,
    ],
)
async def test_a_cursor_the_server_did_not_give_is_invalid_params(stack: Stack, cursor: str) -> None:
    async with connected(stack, BEARER, MODERN) as session:
        with pytest.raises(MCPError) as refused:
            await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
    assert refused.value.code == INVALID_PARAMS
    assert "invalid cursor" in refused.value.message


async def test_an_unknown_session_resource_is_not_found(stack: Stack) -> None:
    async with connected(stack, BEARER, MODERN) as session:
        with pytest.raises(MCPError) as refused:
            await session.read_resource("popagent://sessions/no-such-session")
    assert refused.value.code == INVALID_PARAMS, refused.value
    assert "no-such-session" in refused.value.message and "not found" in refused.value.message
