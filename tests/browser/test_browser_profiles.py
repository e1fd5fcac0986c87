"""Named browser profiles through the real stack and the real browser server: each keeps its
cookies in a directory of its own and brings them back in a fresh browser context, apart from
every other session's; one chat session at a time uses a profile; a profile in use is not deleted."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from chat.helpers import new_session

from browser.helpers import Bridge, CookieSite, bridge
from support.stacks import Stack

pytestmark = pytest.mark.xdist_group("browser")


def profile_dir(stack: Stack, name: str) -> Path:
    return stack.workspace_root.parent / "browser-profiles" / name


async def page_text(b: Bridge, url: str) -> str:
    """The page at `url` as the session's tab shows it (its snapshot)."""
    await b.op("browser_navigate", url=url)
    return await b.text("browser_snapshot")


async def create(client: httpx.AsyncClient, **body: object) -> dict[str, object]:
    created = await client.post("/api/browser/profiles", json=body)
    assert created.status_code == 201, created.text
    return created.json()


async def test_a_profile_keeps_its_cookies_in_its_own_directory_apart_from_other_sessions(
    stack: Stack, cookie_site: CookieSite
) -> None:
    name = f"work-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        profile = await create(client, name=name)
        assert profile == {
            "name": name,
            "allowedOrigins": [],
            "blockedOrigins": [],
            "sessionId": None,
            "createdAt": profile["createdAt"],
        }
        folder = profile_dir(stack, name)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert (await client.post("/api/browser/profiles", json={"name": name})).status_code == 409
        assert (await client.post("/api/browser/profiles", json={"name": "../up"})).status_code == 422

        mine, other, plain = [await new_session(client) for _ in range(3)]
        chosen = await client.put(f"/api/browser/sessions/{mine}/profile", json={"profile": name})
        assert chosen.json() == {"sessionId": mine, "profile": name}
        # Never two sessions at once, and never deleted while in use.
        taken = await client.put(f"/api/browser/sessions/{other}/profile", json={"profile": name})
        assert taken.status_code == 409 and f"in use by chat session {mine}" in taken.json()["error"]
        refused = await client.delete(f"/api/browser/profiles/{name}")
        assert refused.status_code == 409 and mine in refused.json()["error"]
        listed = (await client.get("/api/browser/profiles")).json()["profiles"]
        assert {"name": name, "sessionId": mine} in [{"name": p["name"], "sessionId": p["sessionId"]} for p in listed]

        async with bridge(stack, mine) as b:
            assert "set alpha" in await page_text(b, cookie_site.url("site.test", "/set?v=alpha"))
            assert "pa=alpha" in await page_text(b, cookie_site.url("site.test", "/show"))
        saved = json.loads((folder / "storage-state.json").read_text())
        assert [(c["name"], c["value"]) for c in saved["cookies"]] == [("pa", "alpha")]
        assert stat.S_IMODE((folder / "storage-state.json").stat().st_mode) == 0o600
        sessions = (await client.get("/api/browser/sessions")).json()["sessions"]
        assert {"sessionId": mine, "takenOver": False, "profile": name} in sessions

        # A session without the profile has none of its cookies (the default context is another).
        async with bridge(stack, plain) as b:
            assert "cookies: []" in await page_text(b, cookie_site.url("site.test", "/show"))

        # Closing the tabs closes the profile's browser context; the next one starts from the directory.
        assert (await client.delete(f"/api/browser/sessions/{mine}")).json() == {"closed": True}
        async with bridge(stack, mine) as b:
            assert "pa=alpha" in await page_text(b, cookie_site.url("site.test", "/show"))
        assert (await client.delete(f"/api/browser/sessions/{mine}")).json() == {"closed": True}

        # The directory is what the profile is: a cookie edited there is what the browser sends.
        saved["cookies"][0]["value"] = "edited"
        (folder / "storage-state.json").write_text(json.dumps(saved))
        async with bridge(stack, mine) as b:
            assert "pa=edited" in await page_text(b, cookie_site.url("site.test", "/show"))
            # Changing the profile while the session has tabs is refused.
            busy = await client.delete(f"/api/browser/sessions/{mine}/profile")
            assert busy.status_code == 409 and "close them" in busy.json()["error"]

        # Deleting the chat session releases the profile; then it can be deleted, directory and all.
        assert (await client.delete(f"/api/sessions/{mine}")).status_code in (200, 204)
        listed = (await client.get("/api/browser/profiles")).json()["profiles"]
        assert next(p for p in listed if p["name"] == name)["sessionId"] is None
        assert (await client.get(f"/api/browser/sessions/{mine}/profile")).json() == {
            "sessionId": mine,
            "profile": None,
        }
        assert (await client.delete(f"/api/browser/profiles/{name}")).status_code == 204
        assert not folder.exists()
        assert (await client.delete(f"/api/browser/profiles/{name}")).status_code == 404
        missing = await client.put(f"/api/browser/sessions/{other}/profile", json={"profile": name})
        assert missing.status_code == 404


async def test_another_session_gets_the_profile_once_it_is_released(stack: Stack, cookie_site: CookieSite) -> None:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        await create(client, name=name)
        first, second = await new_session(client), await new_session(client)
        (await client.put(f"/api/browser/sessions/{first}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, first) as b:
            await page_text(b, cookie_site.url("site.test", "/set?v=handed"))
        assert (await client.delete(f"/api/browser/sessions/{first}")).json() == {"closed": True}
        released = await client.delete(f"/api/browser/sessions/{first}/profile")
        assert released.json() == {"sessionId": first, "profile": None}
        (await client.put(f"/api/browser/sessions/{second}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, second) as b:
            assert "pa=handed" in await page_text(b, cookie_site.url("site.test", "/show"))
        # The first session is back on the default context: no cookie of the profile's.
        async with bridge(stack, first) as b:
            assert "cookies: []" in await page_text(b, cookie_site.url("site.test", "/show"))
        for session in (first, second):
            await client.delete(f"/api/sessions/{session}")


async def test_a_profile_keeps_its_local_storage_for_its_next_browser_context(
    stack: Stack, cookie_site: CookieSite
) -> None:
    # Beside its cookies, the storage state keeps each origin's local storage; a fresh context of the
    # profile gets it back on that origin's pages, and a session without the profile does not.
    name = f"store-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        await create(client, name=name)
        mine, plain = await new_session(client), await new_session(client)
        (await client.put(f"/api/browser/sessions/{mine}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, mine) as b:
            await page_text(b, cookie_site.url("store.test", "/store?v=beta"))
            assert "local storage: [beta]" in await page_text(b, cookie_site.url("store.test", "/stored"))
        saved = json.loads((profile_dir(stack, name) / "storage-state.json").read_text())
        assert [(o["origin"], o["localStorage"]) for o in saved["origins"]] == [
            (cookie_site.origin("store.test"), [{"name": "pa", "value": "beta"}])
        ]

        # Its tabs closed, the profile's browser context goes; the next one starts from the directory.
        assert (await client.delete(f"/api/browser/sessions/{mine}")).json() == {"closed": True}
        async with bridge(stack, mine) as b:
            assert "local storage: [beta]" in await page_text(b, cookie_site.url("store.test", "/stored"))
            # Only on the origin that stored it.
            assert "local storage: []" in await page_text(b, cookie_site.url("other.test", "/stored"))
        async with bridge(stack, plain) as b:
            assert "local storage: []" in await page_text(b, cookie_site.url("store.test", "/stored"))
        for session in (mine, plain):
            assert (await client.delete(f"/api/sessions/{session}")).status_code in (200, 204)
        assert (await client.delete(f"/api/browser/profiles/{name}")).status_code == 204


async def test_profile_routes_refuse_bad_input(stack: Stack) -> None:
    async with stack.client() as client:
        for body in ({"name": "Upper"}, {"name": "a" * 64}, {"name": "ok", "blockedOrigins": ["ftp://x.test"]}):
            answer = await client.post("/api/browser/profiles", json=body)
            assert answer.status_code == 422, (body, answer.text)
        session = await new_session(client)
        unknown = await client.put(f"/api/browser/sessions/{session}/profile", json={"profile": "nope-none"})
        assert unknown.status_code == 404 and "nope-none" in unknown.json()["error"]
    async with bridge(stack, session, caller="gateway") as b:
        with pytest.raises(grpc.aio.AioRpcError):
            await b.op("browser_snapshot")
