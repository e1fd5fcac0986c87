"""A session exported over real HTTP: Markdown with the conversation (text, files, sources, tool calls;
no reasoning and no UI data parts) and JSON equal to what GET answers, each as a download named
after the chat."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

CONVERSATION: list[dict[str, Any]] = [
    {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "What does the release page say?"},
            {"type": "file", "mediaType": "text/plain", "filename": "notes.txt", "url": "data:text/plain;base64,aGk="},
        ],
    },
    {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "private musing"},
            {"type": "data-activity", "data": {"kind": "delegation"}},
            {
                "type": "tool-webFetch",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"url": "https://example.com/release"},
                "output": {"text": "Version 2 ships ```fenced``` code"},
            },
            {"type": "source-url", "sourceId": "s1", "url": "https://example.com/release", "title": "Release notes"},
            {"type": "text", "text": "It says **version 2** ships in March."},
        ],
    },
]


async def test_a_chat_exports_as_markdown_and_as_json(client: httpx.AsyncClient) -> None:
    created = (await client.post("/api/sessions", json={"title": "Release plans: Ünïcode & more"})).json()
    session = created["id"]
    saved = await client.put(f"/api/sessions/{session}", json={"revision": 0, "messages": CONVERSATION})
    assert saved.status_code == 200, saved.text

    markdown = await client.get(f"/api/sessions/{session}/export", params={"format": "markdown"})
    assert markdown.status_code == 200, markdown.text
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert 'filename="release-plans-unicode-more.md"' in markdown.headers["content-disposition"]
    text = markdown.text
    assert text.startswith("# Release plans: Ünïcode & more\n")
    assert text.index("## User") < text.index("What does the release page say?") < text.index("## popagent")
    assert "*Attached: notes.txt (text/plain)*" in text
    assert "**Tool `webFetch`** (output-available)" in text and '"url": "https://example.com/release"' in text
    # The output holds a fence: the export's own fence is longer, so it stays one block.
    assert "````\n" in text and "Version 2 ships ```fenced``` code" in text
    assert "*Source: [Release notes](https://example.com/release)*" in text
    assert text.rstrip().endswith("It says **version 2** ships in March.")
    assert "private musing" not in text and "delegation" not in text

    as_json = await client.get(f"/api/sessions/{session}/export", params={"format": "json"})
    assert as_json.status_code == 200 and as_json.headers["content-type"] == "application/json"
    assert 'filename="release-plans-unicode-more.json"' in as_json.headers["content-disposition"]
    loaded = await client.get(f"/api/sessions/{session}")
    assert orjson.loads(as_json.content) == loaded.json()
    assert orjson.loads(as_json.content)["messages"] == CONVERSATION

    # Markdown is the default; an unknown format or session is refused with a reason.
    default = await client.get(f"/api/sessions/{session}/export")
    assert default.headers["content-type"].startswith("text/markdown") and default.text.startswith(text.splitlines()[0])
    refused = await client.get(f"/api/sessions/{session}/export", params={"format": "pdf"})
    assert refused.status_code == 422 and "format" in refused.text
    assert (await client.get("/api/sessions/no-such-session/export")).status_code == 404


async def test_an_untitled_chat_is_named_after_its_id(client: httpx.AsyncClient) -> None:
    created = (await client.post("/api/sessions", json={"title": "???"})).json()
    exported = await client.get(f"/api/sessions/{created['id']}/export")
    assert exported.status_code == 200
    assert f'filename="chat-{created["id"]}.md"' in exported.headers["content-disposition"]
    assert "## " not in exported.text  # no message, no heading
