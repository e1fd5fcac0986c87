"""A chat session's recording: after each browser operation the agent runs, a screenshot of the
session's page with the operation and its arguments (scrubbed of stored secrets), listed and
downloadable through the routes, bounded per session (oldest dropped), deleted with the session."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import nats
import pytest
from chat.helpers import new_session

from browser.helpers import CookieSite, bind_canary, bridge
from popagent.events.v1 import events_pb2
from popagent_browser_bridge.repo import RecordingRepo
from popagent_core import subjects
from support.browser_peer import LoginSite
from support.canary import CANARY
from support.stacks import Stack
from support.waiting import eventually

pytestmark = pytest.mark.xdist_group("browser")

PNG = b"\x89PNG\r\n\x1a\n"


async def test_each_operation_is_recorded_listed_downloadable_and_deleted_with_the_session(
    stack: Stack, site: LoginSite, cookie_site: CookieSite
) -> None:
    await bind_canary(stack, site)
    async with stack.client() as client:
        session = await new_session(client)
        async with bridge(stack, session) as b:
            await b.op("browser_navigate", url=cookie_site.url("rec.test", "/page"))
            snapshot = await b.text("browser_snapshot")
            link = snapshot.split('link "Show cookies" [ref=')[1].split("]")[0]
            await b.op("browser_click", target=link)
            # A secret in an argument is stored as the results show it: scrubbed.
            await b.op("browser_navigate", url=cookie_site.url("rec.test", f"/page?q={CANARY}"))
        recording = (await client.get(f"/api/browser/sessions/{session}/recordings")).json()
        frames = recording["frames"]
        # The snapshot only read the page: no frame of its own.
        assert [f["operation"] for f in frames] == ["browser_navigate", "browser_click", "browser_navigate"]
        assert [f["seq"] for f in frames] == [1, 2, 3]
        assert json.loads(frames[0]["argumentsJson"]) == {"url": cookie_site.url("rec.test", "/page")}
        assert json.loads(frames[1]["argumentsJson"]) == {"target": link}
        assert CANARY not in json.dumps(recording) and "/page?q=" in frames[2]["argumentsJson"]
        assert recording["maxFrames"] == 200 and recording["maxBytes"] == 32 * 1024 * 1024
        for frame in frames:
            image = await client.get(f"/api/browser/sessions/{session}/recordings/{frame['seq']}")
            assert image.status_code == 200 and image.headers["content-type"] == "image/png"
            assert image.content.startswith(PNG) and len(image.content) == frame["bytes"]
            assert "attachment" in image.headers["content-disposition"]
        assert (await client.get(f"/api/browser/sessions/{session}/recordings/9")).status_code == 404

        # Closing the tab keeps the recording; deleting the chat session deletes it.
        await client.delete(f"/api/browser/sessions/{session}")
        assert len((await client.get(f"/api/browser/sessions/{session}/recordings")).json()["frames"]) == 3
        assert (await client.delete(f"/api/sessions/{session}")).status_code in (200, 204)
        assert (await client.get(f"/api/browser/sessions/{session}/recordings")).json()["frames"] == []
        assert (await client.get(f"/api/browser/sessions/{session}/recordings/1")).status_code == 404


@contextlib.asynccontextmanager
async def bridge_pool(stack: Stack) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(
        stack.dsn, min_size=1, max_size=2, server_settings={"search_path": "browser_bridge"}
    )
    try:
        yield pool
    finally:
        await pool.close()


async def test_a_recording_keeps_the_newest_frames_within_its_count_and_byte_bounds(stack: Stack) -> None:
    frame = PNG + b"x" * 992  # 1000 bytes
    async with bridge_pool(stack) as pool:
        by_count = RecordingRepo(pool, max_frames=3, max_bytes=1_000_000)
        for n in range(5):
            await by_count.add("bounded-count", f"op{n}", "{}", False, frame)
        assert [(f.seq, f.operation) for f in await by_count.frames("bounded-count")] == [
            (3, "op2"),
            (4, "op3"),
            (5, "op4"),
        ]
        by_bytes = RecordingRepo(pool, max_frames=100, max_bytes=2500)
        for n in range(4):
            await by_bytes.add("bounded-bytes", f"op{n}", "{}", False, frame)
        kept = await by_bytes.frames("bounded-bytes")
        assert [f.seq for f in kept] == [3, 4] and sum(f.bytes for f in kept) == 2000
        # One session's bounds never drop another's frames.
        assert len(await by_count.frames("bounded-count")) == 3
        await by_count.delete("bounded-count")
        await by_bytes.delete("bounded-bytes")
        assert await by_count.frames("bounded-count") == []


async def test_a_deletion_the_bridge_missed_reaches_it_through_the_durable_event(
    stack: Stack, cookie_site: CookieSite
) -> None:
    # agent-runner tells browser-bridge at once over gRPC when a session is deleted; a bridge that
    # was down then reads the session-deleted fact from JetStream. The test publishes that fact
    # as agent-runner's outbox does, without the direct call.
    name = f"missed-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        (await client.post("/api/browser/profiles", json={"name": name})).raise_for_status()
        session = await new_session(client)
        (await client.put(f"/api/browser/sessions/{session}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, session) as b:
            await b.op("browser_navigate", url=cookie_site.url("missed.test", "/page"))
        assert len((await client.get(f"/api/browser/sessions/{session}/recordings")).json()["frames"]) == 1

        nc = await nats.connect(stack.nats_url)
        try:
            js = nc.jetstream()
            payload = events_pb2.SessionDeleted(session_id=session, workspace_id="w").SerializeToString()
            await js.publish(subjects.SESSION_DELETED, payload, headers={"Nats-Msg-Id": f"deleted-{session}"})
        finally:
            await nc.close()

        async def state() -> tuple[int, str | None]:
            frames = (await client.get(f"/api/browser/sessions/{session}/recordings")).json()["frames"]
            [profile] = [p for p in (await client.get("/api/browser/profiles")).json()["profiles"] if p["name"] == name]
            return len(frames), profile["sessionId"]

        await eventually(state, until=lambda seen: seen == (0, None), within=30, what="the recording and profile to go")
        assert (await client.delete(f"/api/browser/profiles/{name}")).status_code in (200, 204)
        await client.delete(f"/api/sessions/{session}")
