"""Attachments over the real chat stack: stored with the session (bounded, typed by their bytes),
served only as downloads, offered to the model in the turn, copied into the workspace on request,
and gone with their session."""

from __future__ import annotations

import base64
import struct
import uuid
import zlib
from typing import Any

import httpx

from chat.helpers import chat, new_session, new_workspace_session, text_of
from popagent_agent_runner.attachments import sniff
from popagent_gateway.dto.attachments import ATTACHMENT_MEDIA_TYPES
from support.model_gateway import Turn
from support.stacks import Stack

MAX_BYTES = 4 * 1024 * 1024


def tiny_png() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


async def upload(client: httpx.AsyncClient, session: str, filename: str, content: bytes) -> httpx.Response:
    return await client.post(
        f"/api/sessions/{session}/attachments",
        params={"filename": filename},
        content=content,
        headers={"content-type": "application/octet-stream"},
    )


async def uploaded(client: httpx.AsyncClient, session: str, filename: str, content: bytes) -> dict[str, Any]:
    response = await upload(client, session, filename, content)
    assert response.status_code == 201, response.text
    return response.json()


def file_part(attachment: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "file",
        "mediaType": attachment["mediaType"],
        "filename": attachment["filename"],
        "url": attachment["url"],
    }


def with_files(text: str, *attachments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"user-{uuid.uuid4().hex[:8]}",
        "role": "user",
        "parts": [{"type": "text", "text": text}, *(file_part(a) for a in attachments)],
    }


async def test_upload_is_typed_by_its_bytes_bounded_and_served_only_as_a_download(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        notes = await uploaded(client, session, "notes.csv", b"city,rain\nOslo,12\n")
        assert notes["mediaType"] == "text/csv"
        assert notes["size"] == 18
        assert notes["url"] == f"/api/sessions/{session}/attachments/{notes['id']}"
        # A page claiming to be HTML is stored as plain text and never served inline.
        page = await uploaded(client, session, "evil.html", b"<html><script>alert(1)</script></html>")
        assert page["mediaType"] == "text/plain"
        download = await client.get(page["url"])
        assert download.status_code == 200
        assert download.content == b"<html><script>alert(1)</script></html>"
        assert download.headers["content-type"].startswith("text/plain")
        assert download.headers["content-disposition"].startswith("attachment;")
        assert download.headers["x-content-type-options"] == "nosniff"
        image = await uploaded(client, session, "pixel.png", tiny_png())
        assert image["mediaType"] == "image/png"

        # Neither an executable nor any other binary is kept; nor an empty file; nor one over 4 MiB.
        refused = await upload(client, session, "tool.exe", b"MZ\x90\x00\x03\x00\x00\x00\xff\xff")
        assert refused.status_code == 400
        assert "not a file type chat takes" in refused.json()["error"]
        assert (await upload(client, session, "empty.txt", b"")).status_code == 400
        too_large = await upload(client, session, "big.txt", b"a" * (MAX_BYTES + 1))
        assert too_large.status_code == 413
        fits = await upload(client, session, "big.txt", b"a" * MAX_BYTES)
        assert fits.status_code == 201, fits.text

        listed = (await client.get(f"/api/sessions/{session}/attachments")).json()["attachments"]
        assert [a["filename"] for a in listed] == ["notes.csv", "evil.html", "pixel.png", "big.txt"]
        assert (await upload(client, "no-such-session", "a.txt", b"a")).status_code == 404
        assert (await client.get(f"/api/sessions/{session}/attachments/att-{'0' * 32}")).status_code == 404
        # Another session's attachment is not reachable under this one.
        other = await new_session(client)
        assert (await client.get(f"/api/sessions/{other}/attachments/{notes['id']}")).status_code == 404


async def test_the_model_reads_text_attachments_and_sees_images(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        notes = await uploaded(client, session, "rain.csv", b"city,rain\nOslo,12\nBergen,31\n")
        image = await uploaded(client, session, "pixel.png", tiny_png())
        stack.models.push(Turn.say("Bergen is the wettest."))
        chunks = await chat(client, session, with_files("Which city is wettest?", notes, image))
        assert text_of(chunks) == "Bergen is the wettest."

        (request,) = stack.models.requests
        content = request["messages"][-1]["content"]
        texts = [part["text"] for part in content if part["type"] == "text"]
        assert "Which city is wettest?" in texts
        assert '<attachment name="rain.csv" type="text/csv">\ncity,rain\nOslo,12\nBergen,31\n\n</attachment>' in texts
        images = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        assert images == ["data:image/png;base64," + base64.b64encode(tiny_png()).decode()]

        # The stored message lists its files as sent.
        stored = (await client.get(f"/api/sessions/{session}")).json()["messages"]
        files = [part for part in stored[0]["parts"] if part["type"] == "file"]
        assert [f["url"] for f in files] == [notes["url"], image["url"]]


async def test_a_pdf_is_named_not_inlined(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        pdf = await uploaded(client, session, "report.pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\nbinary")
        assert pdf["mediaType"] == "application/pdf"
        stack.models.push(Turn.say("ok"))
        await chat(client, session, with_files("Read this", pdf))
        # Text only: one string, as a model request carries it.
        content = stack.models.requests[0]["messages"][-1]["content"]
        assert content.startswith('Read this\n[attached file "report.pdf" (application/pdf, 21 bytes): not readable')
        assert "binary" not in content


async def test_a_message_takes_at_most_eight_files_of_its_own_session(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        files = [await uploaded(client, session, f"f{i}.txt", b"x") for i in range(9)]
        refused = await chat(client, session, with_files("nine", *files), expect_status=400)
        assert "at most 8 attachments" in refused[0]["error"]
        other = await new_session(client)
        foreign = await chat(client, other, with_files("not mine", files[0]), expect_status=400)
        assert "belongs to another session" in foreign[0]["error"]
        assert stack.models.requests == []


async def test_attachments_are_deleted_with_their_session(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        notes = await uploaded(client, session, "notes.txt", b"hello")
        assert (await client.delete(f"/api/sessions/{session}")).status_code in (200, 204)
        assert (await client.get(notes["url"])).status_code == 404
    async with stack.db() as conn:
        left = await conn.fetchval("SELECT count(*) FROM popagent_session_attachments WHERE session_id = $1", session)
    assert left == 0


async def test_copy_into_the_workspace_needs_write_access_and_never_overwrites(stack: Stack) -> None:
    async with stack.client() as client:
        name = f"repo-{uuid.uuid4().hex[:8]}"
        folder = stack.workspace_root / name
        folder.mkdir()
        (folder / "taken.txt").write_text("mine\n")
        session = await new_workspace_session(client, name, "attachments")
        notes = await uploaded(client, session, "notes.md", b"# Notes\n")
        copy = f"{notes['url']}/copy-to-workspace"

        agents = (await client.get("/api/agents")).json()["agents"]
        before = next(agent["workspaceAccess"] for agent in agents if agent["id"] == "popagent")
        try:
            assert (
                await client.patch("/api/agents/popagent", json={"workspaceAccess": "read-only"})
            ).status_code == 200
            refused = await client.post(copy, json={})
            assert refused.status_code == 409
            assert "'read-only' workspace access" in refused.json()["error"]
            assert not (folder / "notes.md").exists()

            assert (
                await client.patch("/api/agents/popagent", json={"workspaceAccess": "read-write"})
            ).status_code == 200
            copied = await client.post(copy, json={})
            assert copied.status_code == 200, copied.text
            assert copied.json() == {"workspaceId": name, "path": "notes.md", "size": 8}
            assert (folder / "notes.md").read_bytes() == b"# Notes\n"
            nested = await client.post(copy, json={"path": "docs/in/notes.md"})
            assert nested.status_code == 200, nested.text
            assert (folder / "docs" / "in" / "notes.md").read_bytes() == b"# Notes\n"

            exists = await client.post(copy, json={"path": "taken.txt"})
            assert exists.status_code == 409
            assert "already exists" in exists.json()["error"]
            assert (folder / "taken.txt").read_text() == "mine\n"
            for outside in ("../escape.md", "/etc/escape.md", ".git/config"):
                escaped = await client.post(copy, json={"path": outside})
                assert escaped.status_code in (400, 409), (outside, escaped.text)
            assert not (stack.workspace_root / "escape.md").exists()
        finally:
            await client.patch("/api/agents/popagent", json={"workspaceAccess": before})


async def test_a_session_holds_at_most_a_hundred_attachments(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        for index in range(100):
            await uploaded(client, session, f"n{index}.txt", b"x")
        refused = await upload(client, session, "one-more.txt", b"x")
        assert refused.status_code == 429
        assert "at most 100 attachments" in refused.json()["error"]


def test_the_download_route_documents_every_type_a_file_is_sniffed_as() -> None:
    sniffed = {media_type for _, media_type in sniff.IMAGE_SIGNATURES}
    sniffed |= {"image/webp", sniff.PDF, sniff.PLAIN, *sniff.TEXT_TYPES.values()}
    assert set(ATTACHMENT_MEDIA_TYPES) == sniffed
