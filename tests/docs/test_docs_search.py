"""Documentation search over real HTTP: this repository's Markdown indexed through the gateway and
agent-runner, embedded and reranked by the scripted model server, stored in pgvector + full text."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from docs.docs_support import copy_repository_markdown, index_and_wait, register_workspace, search, wait_index
from popagent_agent_runner.docs.search import DocsSearch
from popagent_agent_runner.docs.store import DocsStore
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from support.deep_trees import make_nested, remove_nested
from support.stacks import EMBEDDING_MODEL, MODELS_API_KEY, Stack

HOOKS = "docs/hooks.md"
CONFIGURATION = "docs/configuration.md"
ARCHITECTURE = "docs/architecture.md"
HANDS = "The agents' hands: workspaces, file tools and the sandboxed shell"
# (question, file, the section its answer is in): written from the files, not from the index.
QUESTIONS = [
    ("Which command starts the whole stack and prints the URL and API key?", "README.md", "Two commands"),
    ("How do I point popagent at Ollama or vLLM?", CONFIGURATION, "Pointing it at a model gateway"),
    (
        "What happens when the model gateway catalog does not list a configured model id?",
        CONFIGURATION,
        "Pointing it at a model gateway",
    ),
    ("Which processes does deploy/compose.yaml run in production?", "README.md", "Production"),
    ("Do workspace commands run under bubblewrap with no network?", ARCHITECTURE, HANDS),
    ("Which workspace tools does a read-only agent get?", ARCHITECTURE, HANDS),
    ("Which process owns sessions, threads, memories and workspaces?", ARCHITECTURE, "Processes"),
    ("What is the request body cap POPAGENT_MAX_BODY_BYTES?", CONFIGURATION, "Environment variables"),
    ("Which variable lists the exact hostnames hook handler URLs must use?", HOOKS, "Configuration"),
    ("How are hook requests signed with webhook-id and webhook-timestamp?", HOOKS, "Signature (Standard Webhooks)"),
    ("What may a hook response outcome and replacement be?", HOOKS, "Responses"),
    ("What are the hook failure classes transport, timeout and malformed_response?", HOOKS, "Execution and failures"),
    (
        "How does the hooks service refuse private addresses and DNS rebinding at connect time?",
        HOOKS,
        "Outbound safety",
    ),
    ("Which secret tool payloads are redacted before tool events are sent?", HOOKS, "Redaction"),
    ("How long are hook audit rows kept and how many per session?", HOOKS, "Audit"),
    ("How does a caller dispatch a PreToolUse event with HooksClient?", HOOKS, "Callers"),
    ("What does the PreToolUse request detail contain?", HOOKS, "Requests"),
    ("How is the gzipped UI bundle size budget checked by npm run build?", "ui/README.md", "popagent web UI"),
    (
        "Which package is the caller side of the hooks service and what does it depend on?",
        "libs/popagent-hooks-client/README.md",
        "popagent-hooks-client",
    ),
    ("How are the UI's API types generated with openapi-typescript?", "ui/README.md", "popagent web UI"),
]


@pytest.fixture
async def repo_docs(stack: Stack) -> str:
    """This repository's Markdown as a workspace, indexed (once per stack)."""
    workspace_id = "repo-docs"
    async with stack.client() as client:
        registered = {w["id"] for w in (await client.get("/api/workspaces")).json()["workspaces"]}
        if workspace_id not in registered:
            copy_repository_markdown(stack.workspace_root / workspace_id)
            await register_workspace(client, workspace_id, workspace_id)
        status = await index_and_wait(client, workspace_id)
    assert status["state"] == "idle", status
    return workspace_id


async def test_the_repository_markdown_is_indexed_by_file_and_section(stack: Stack, repo_docs: str) -> None:
    async with stack.client() as client:
        listed = (await client.get(f"/api/workspaces/{repo_docs}/documents")).json()["documents"]
        status = (await client.get(f"/api/workspaces/{repo_docs}/documents/index")).json()
    paths = [document["path"] for document in listed]
    assert {"README.md", HOOKS, "ui/README.md", "libs/popagent-hooks-client/README.md"} <= set(paths)
    assert paths == sorted(paths) and all(document["indexed"] and document["origin"] == "file" for document in listed)
    assert status["documents"] == len(listed) and status["chunks"] == sum(d["chunkCount"] for d in listed)
    assert status["embeddingModel"] == EMBEDDING_MODEL and status["include"] == ["**/*.md"]


async def test_twenty_questions_find_their_file_and_section_in_the_top_five(stack: Stack, repo_docs: str) -> None:
    found = []
    async with stack.client() as client:
        for question, path, section in QUESTIONS:
            result = await search(client, repo_docs, question, k=5)
            assert result["ranking"] == "rerank"
            hit = any(h["path"] == path and section in h["headingPath"] for h in result["hits"])
            found.append((hit, question))
    recall = sum(hit for hit, _ in found) / len(found)
    assert recall >= 0.9, [question for hit, question in found if not hit]
    # Every question went through the reranker with the fused head.
    assert len(stack.models.rerank_requests) == len(QUESTIONS)


async def test_fused_order_without_a_reranker_also_finds_the_sections(stack: Stack, repo_docs: str) -> None:
    pool = await asyncpg.create_pool(
        stack.dsn, server_settings={"search_path": "agent_runner,public"}, min_size=1, max_size=2
    )
    try:
        async with GatewayRetrieval(stack.models.url, MODELS_API_KEY) as retrieval:
            engine = DocsSearch(store=DocsStore(pool), retrieval=retrieval, embedding_model=EMBEDDING_MODEL)
            found = 0
            for question, path, section in QUESTIONS:
                hits = await engine.search(repo_docs, question, 5)
                found += any(h.path == path and section in h.heading_path for h in hits)
            prefixed = await engine.search(repo_docs, "hooks configuration", 5, path_prefix="ui/")
    finally:
        await pool.close()
    assert found / len(QUESTIONS) >= 0.8
    assert not stack.models.rerank_requests
    assert prefixed and all(hit.path.startswith("ui/") for hit in prefixed)


async def test_editing_one_file_re_embeds_only_that_file_and_a_deleted_file_is_removed(stack: Stack) -> None:
    root = stack.workspace_root / "edits"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "install.md").write_text("# Install\n\nRun the installer with sudo.\n")
    (root / "guide" / "usage.md").write_text("# Usage\n\nCall the frobnicate command.\n")
    (root / "notes.md").write_text("# Notes\n\nNothing yet.\n")
    async with stack.client() as client:
        await register_workspace(client, "edits", "edits")
        first = await index_and_wait(client, "edits")
        assert (first["filesSeen"], first["filesEmbedded"], first["documents"]) == (3, 3, 3)

        stack.models.reset()
        unchanged = await index_and_wait(client, "edits")
        assert (unchanged["filesToEmbed"], unchanged["chunksEmbedded"]) == (0, 0)
        assert stack.models.embedding_requests == []

        (root / "guide" / "usage.md").write_text("# Usage\n\nCall the quuxify command instead.\n")
        (root / "notes.md").unlink()
        edited = await index_and_wait(client, "edits")
        embedded = [text for body in stack.models.embedding_requests for text in body["input"]]
        assert (edited["filesEmbedded"], edited["filesRemoved"], edited["documents"]) == (1, 1, 2)
        assert embedded and all(text.startswith("guide/usage.md") for text in embedded)

        hits = (await search(client, "edits", "quuxify command"))["hits"]
        assert hits[0]["path"] == "guide/usage.md" and "quuxify" in hits[0]["content"]
        assert not (await search(client, "edits", "frobnicate"))["hits"] or all(
            "frobnicate" not in h["content"] for h in (await search(client, "edits", "frobnicate"))["hits"]
        )
        assert "notes.md" not in {h["path"] for h in (await search(client, "edits", "nothing yet notes"))["hits"]}


async def test_a_search_in_one_workspace_never_returns_another_workspaces_chunk(stack: Stack) -> None:
    for name, word in (("alpha", "zebra"), ("beta", "zebra")):
        (stack.workspace_root / name).mkdir()
        for n in range(3):
            (stack.workspace_root / name / f"{name}-{n}.md").write_text(
                f"# {name} {n}\n\nThe {word} lives in {name}.\n"
            )
    async with stack.client() as client:
        for name in ("alpha", "beta"):
            await register_workspace(client, name, name)
            await index_and_wait(client, name)
        for name in ("alpha", "beta"):
            hits = (await search(client, name, "where does the zebra live", k=50))["hits"]
            assert len(hits) == 3 and all(hit["path"].startswith(f"{name}-") for hit in hits)


async def test_gitignored_and_excluded_files_are_not_indexed_and_globs_are_kept(stack: Stack) -> None:
    root = stack.workspace_root / "ignoring"
    (root / "build").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / ".gitignore").write_text("build/\n")
    (root / "build" / "generated.md").write_text("# Generated\n")
    (root / "docs" / "kept.md").write_text("# Kept\n")
    (root / "docs" / "draft.md").write_text("# Draft\n")
    (root / "docs" / "page.txt").write_text("Text.\n")
    (stack.workspace_root / "outside.md").write_text("# Outside the workspace\n")
    (root / "docs" / "link.md").symlink_to(stack.workspace_root / "outside.md")
    async with stack.client() as client:
        await register_workspace(client, "ignoring", "ignoring")
        status = await index_and_wait(client, "ignoring", exclude=["docs/draft*"])
        assert status["exclude"] == ["docs/draft*"]
        listed = (await client.get("/api/workspaces/ignoring/documents")).json()["documents"]
        assert [d["path"] for d in listed] == ["docs/kept.md"]
        # A later run without globs keeps them; new globs replace them.
        again = await index_and_wait(client, "ignoring")
        assert again["exclude"] == ["docs/draft*"]
        widened = await index_and_wait(client, "ignoring", include=["**/*.md", "**/*.txt"], exclude=[])
        listed = (await client.get("/api/workspaces/ignoring/documents")).json()["documents"]
        assert widened["include"] == ["**/*.md", "**/*.txt"]
        assert [d["path"] for d in listed] == ["docs/draft.md", "docs/kept.md", "docs/page.txt"]


async def test_an_interrupted_run_is_resumed_by_the_next_start_and_embeds_only_what_is_missing(stack: Stack) -> None:
    root = stack.workspace_root / "resumed"
    root.mkdir()
    for n in range(4):
        (root / f"part-{n}.md").write_text(f"# Part {n}\n\nChapter {n} of the story.\n")
    async with stack.client() as client:
        await register_workspace(client, "resumed", "resumed")
        await index_and_wait(client, "resumed")
        (root / "part-4.md").write_text("# Part 4\n\nThe ending.\n")
        # As a worker stopped mid-run leaves it: still `running`, the new file not yet embedded.
        async with stack.db() as conn:
            await conn.execute("UPDATE popagent_document_indexes SET state = 'running' WHERE workspace_id = 'resumed'")
        stack.models.reset()
        async with stack.extra_runner():
            status = await wait_index(client, "resumed")
        embedded = [text for body in stack.models.embedding_requests for text in body["input"]]
    assert status["state"] == "idle" and status["filesEmbedded"] == 1 and status["documents"] == 5
    assert embedded and all(text.startswith("part-4.md") for text in embedded)


async def test_a_run_waits_while_another_worker_holds_the_workspace(stack: Stack) -> None:
    root = stack.workspace_root / "locked"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nLocked away.\n")
    async with stack.client() as client, stack.db() as other_worker:
        await register_workspace(client, "locked", "locked")
        # What a run on another agent-runner worker holds for as long as it goes.
        key = "SELECT pg_try_advisory_lock(hashtextextended('popagent-docs-index:' || $1, 0))"
        assert await other_worker.fetchval(key, "locked")
        started = await client.post("/api/workspaces/locked/documents/index")
        assert started.status_code == 202 and started.json()["state"] == "queued"
        await asyncio.sleep(0.5)
        status = (await client.get("/api/workspaces/locked/documents/index")).json()
        assert status["state"] == "queued" and status["documents"] == 0
        assert stack.models.embedding_requests == []
        await other_worker.fetchval(
            "SELECT pg_advisory_unlock(hashtextextended('popagent-docs-index:' || $1, 0))", "locked"
        )
        status = await index_and_wait(client, "locked")
    assert (status["state"], status["documents"], status["filesEmbedded"]) == ("idle", 1, 1)


async def test_a_workspace_thousands_of_folders_deep_is_indexed_down_to_the_walk_bound(stack: Stack) -> None:
    # 2,000 levels (3,999 characters of path): the run failed with RecursionError and stayed `running`.
    root = stack.workspace_root / "deep-docs"
    root.mkdir()
    (root / "top.md").write_text("# Top\n\nAt the root.\n")
    make_nested(root, 2000, {4: ("near.md", "# Near\n\nFive down.\n"), 1999: ("bottom.md", "# Bottom\n")})
    try:
        async with stack.client() as client:
            await register_workspace(client, "deep-docs", "deep-docs")
            status = await index_and_wait(client, "deep-docs")
            assert status["state"] == "idle", status
            listed = (await client.get("/api/workspaces/deep-docs/documents")).json()["documents"]
            assert [d["path"] for d in listed] == ["d/d/d/d/d/near.md", "top.md"]
    finally:
        remove_nested(root)


async def test_a_glob_the_matcher_refuses_is_a_clear_error_not_a_stuck_run(stack: Stack) -> None:
    root = stack.workspace_root / "bad-glob"
    root.mkdir()
    (root / "a.md").write_text("# A\n")
    async with stack.client() as client:
        await register_workspace(client, "bad-glob", "bad-glob")
        response = await client.post("/api/workspaces/bad-glob/documents/index", json={"include": ["[z-a].md"]})
        assert response.status_code == 400, response.text
        assert "is not a glob that can be matched" in response.text
