"""A browser profile's network policy, enforced by browser-bridge against a real HTTP server: a
navigation the agent asks for to a blocked (or not allowed) origin is refused before the browser
moves, and a redirect or a link to such an origin is stopped inside the browser before its request
is sent (the server never sees it), the tab blanked and the agent told why."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from chat.helpers import new_session

from browser.helpers import CookieSite, bridge
from support.stacks import Stack
from support.waiting import eventually

pytestmark = pytest.mark.xdist_group("browser")


async def test_blocked_origins_are_refused_before_navigation_and_stopped_on_redirects(
    stack: Stack, cookie_site: CookieSite
) -> None:
    name = f"policy-{uuid.uuid4().hex[:8]}"
    blocked = cookie_site.origin("blocked.test")
    async with stack.client() as client:
        created = await client.post(
            "/api/browser/profiles",
            json={"name": name, "blockedOrigins": [blocked.replace("blocked.test", "Blocked.TEST")]},
        )
        assert created.status_code == 201, created.text
        # Stored as the browser writes origins (scheme and host lower-case).
        assert created.json()["blockedOrigins"] == [blocked]
        session = await new_session(client)
        (await client.put(f"/api/browser/sessions/{session}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, session) as b:
            cookie_site.hosts.clear()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await b.op("browser_navigate", url=cookie_site.url("blocked.test", "/page"))
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"{blocked} is blocked by the network policy of browser profile {name!r}" in (
                refused.value.details() or ""
            )
            # A new tab at a blocked URL is the same request.
            with pytest.raises(grpc.aio.AioRpcError):
                await b.op("browser_tabs", action="new", url=cookie_site.url("blocked.test", "/page"))
            assert "blocked.test" not in cookie_site.hosts

            # Allowed origins work; a redirect to the blocked origin is stopped and the tab blanked.
            assert "hello" in (
                await b.op("browser_navigate", url=cookie_site.url("allowed.test", "/page"))
                and await b.text("browser_snapshot")
            )
            target = cookie_site.url("blocked.test", "/show")
            answer = await b.op("browser_navigate", url=cookie_site.url("allowed.test", f"/redirect?to={target}"))
            text = "\n".join(part.text for part in answer.content)
            assert answer.is_error and "Stopped" in text and blocked in text
            assert "cookies:" not in text
            snapshot = await b.text("browser_snapshot")
            assert "about:blank" in snapshot and "cookies:" not in snapshot
            # The redirected request itself never left the browser.
            assert "blocked.test" not in cookie_site.hosts

            # The policy is replaced at once: an allow-list admits only its origins.
            allowed = cookie_site.origin("allowed.test")
            changed = await client.put(
                f"/api/browser/profiles/{name}/policy", json={"allowedOrigins": [allowed], "blockedOrigins": []}
            )
            assert changed.json()["allowedOrigins"] == [allowed] and changed.json()["blockedOrigins"] == []
            with pytest.raises(grpc.aio.AioRpcError) as outside:
                await b.op("browser_navigate", url=cookie_site.url("other.test", "/page"))
            assert f"{cookie_site.origin('other.test')} is not among the allowed origins" in (
                outside.value.details() or ""
            )
            with pytest.raises(grpc.aio.AioRpcError):
                await b.op("browser_navigate", url="file:///etc/passwd")
            # Now blocked.test is no longer blocked but not allowed either: its redirect is stopped too.
            answer = await b.op("browser_navigate", url=cookie_site.url("allowed.test", f"/redirect?to={target}"))
            assert answer.is_error and "not among the allowed origins" in "\n".join(p.text for p in answer.content)
            # A link that leaves the allowed origins is stopped the same way.
            await b.op("browser_navigate", url=cookie_site.url("allowed.test", "/page"))
            other = cookie_site.url("other.test", "/show")
            await b.op("browser_evaluate", function=f"() => {{ document.querySelector('a').href = {other!r}; }}")
            snapshot = await b.text("browser_snapshot")
            link = snapshot.split('link "Show cookies" [ref=')[1].split("]")[0]
            clicked = await b.op("browser_click", target=link)
            assert clicked.is_error and "other.test" in "\n".join(p.text for p in clicked.content)
            assert "about:blank" in await b.text("browser_snapshot")
            # Neither the redirect nor the link reached a refused origin's server.
            assert "blocked.test" not in cookie_site.hosts and "other.test" not in cookie_site.hosts

        bad = await client.put(
            f"/api/browser/profiles/{name}/policy",
            json={"allowedOrigins": ["https://x.test/path"], "blockedOrigins": []},
        )
        assert bad.status_code == 422
        missing = await client.put(
            "/api/browser/profiles/no-such/policy", json={"allowedOrigins": [], "blockedOrigins": []}
        )
        assert missing.status_code == 404
        await client.delete(f"/api/sessions/{session}")


async def test_a_session_without_a_profile_has_no_policy(stack: Stack, cookie_site: CookieSite) -> None:
    async with stack.client() as client:
        session = await new_session(client)
    async with bridge(stack, session) as b:
        await b.op("browser_navigate", url=cookie_site.url("blocked.test", "/page"))
        assert "hello" in await b.text("browser_snapshot")


async def test_a_pages_own_requests_and_its_popups_are_held_to_the_policy(
    stack: Stack, cookie_site: CookieSite
) -> None:
    # Not only what the agent navigates to: an image, a script's fetch and a popup the page opens
    # by itself never reach a blocked origin's server either.
    name = f"policy-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client:
        created = await client.post(
            "/api/browser/profiles", json={"name": name, "blockedOrigins": [cookie_site.origin("blocked.test")]}
        )
        assert created.status_code == 201, created.text
        session = await new_session(client)
        (await client.put(f"/api/browser/sessions/{session}/profile", json={"profile": name})).raise_for_status()
        async with bridge(stack, session) as b:
            await b.op("browser_navigate", url=cookie_site.url("allowed.test", "/page"))
            cookie_site.hosts.clear()
            blocked, allowed = cookie_site.url("blocked.test", "/show"), cookie_site.url("allowed.test", "/show")
            loads = await b.text(
                "browser_evaluate",
                function=f"""async () => {{
                  const image = (src) => new Promise((done) => {{
                    const img = new Image();
                    img.onload = img.onerror = () => done(src);
                    img.src = src;
                  }});
                  const fetched = (url) => fetch(url, {{ mode: "no-cors" }}).then(() => "sent", () => "refused");
                  await image({blocked + "?img"!r});
                  await image({allowed + "?img"!r});
                  return [await fetched({blocked + "?fetch"!r}), await fetched({allowed + "?fetch"!r})].join(",");
                }}""",
            )
            assert '"refused,sent"' in loads
            # Each request of the page finished (refused or answered) before the script returned.
            assert cookie_site.hosts == ["allowed.test", "allowed.test"]

            await b.op(
                "browser_evaluate",
                function=f"() => {{ window.open({blocked + '?popup'!r}); window.open({allowed + '?popup'!r}); }}",
            )
            # The blocked popup was opened first: by the time the allowed one's request arrived,
            # the blocked one's would have too.
            await eventually(
                lambda: asyncio.sleep(0, result=list(cookie_site.hosts)), until=lambda hosts: len(hosts) >= 3, within=30
            )
            assert cookie_site.hosts[2:] == ["allowed.test"]
        await client.delete(f"/api/sessions/{session}")
