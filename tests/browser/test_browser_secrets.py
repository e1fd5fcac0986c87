"""useBrowserSecret and secret hygiene against the real browser server (codegen on, so typed text
and evaluate sources are echoed): a fill on the bound origin works; look-alike origins (RELIABILITY
row 25) get 0 fills; the canary never reaches the model, hooks, the stream, the database or NATS."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import nats
import orjson
import pytest
from chat.approvals import answer_approval, pending, supervisor_policy
from chat.helpers import chat, new_session, of_type, recorded_turn
from nats.aio.msg import Msg

from browser.helpers import SECRET_NAME, bind_canary, bridge, everything_stored, ref_of
from support.browser_peer import LoginSite
from support.canary import CANARY, assert_no_canary
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")


def _filled(site: LoginSite) -> int:
    return sum(1 for s in site.submissions if s.fields.get("password") == CANARY)


async def test_a_turn_fills_the_bound_origin_and_the_canary_goes_nowhere(stack: Stack, site: LoginSite) -> None:
    origin = await bind_canary(stack, site)
    site.submissions.clear()
    facts: list[bytes] = []
    nc = await nats.connect(stack.nats_url)

    async def collect(msg: Msg) -> None:
        facts.append(msg.data)

    sub = await nc.subscribe(">", cb=collect)
    async with stack.client() as client:
        session = await new_session(client)
        async with bridge(stack, session) as b:
            await b.op("browser_navigate", url=site.url("/login"))
            snapshot = await b.text("browser_snapshot")
        password, submit = ref_of(snapshot, "Password"), ref_of(snapshot, "Sign in")
        stack.models.push(
            Turn.call(ToolCall("useBrowserSecret", {"name": SECRET_NAME, "element": password}, id="c-fill")),
            Turn.call(ToolCall("bifrostNavigator", {"operation": "browser_snapshot", "arguments": {}}, id="c-snap")),
            Turn.call(
                ToolCall(
                    "bifrostNavigator", {"operation": "browser_click", "arguments": {"target": submit}}, id="c-click"
                )
            ),
            Turn.say("Signed in."),
        )
        chunks = await chat(client, session, "sign in with the stored password")
    await sub.unsubscribe()
    await nc.close()

    [filled] = [c for c in of_type(chunks, "tool-output-available") if c["toolCallId"] == "c-fill"]
    assert filled["output"] == {"name": SECRET_NAME, "origin": origin, "success": True}
    # The server printed the password field's value in the snapshot: the bridge removed it.
    [snap] = [c for c in of_type(chunks, "tool-output-available") if c["toolCallId"] == "c-snap"]
    assert "[redacted]" in orjson.dumps(snap).decode()
    assert _filled(site) == 1
    pre = [r for r in stack.hook_requests("PreToolUse") if r["detail"]["toolName"] == "useBrowserSecret"]
    assert [r["detail"]["arguments"] for r in pre] == [{"name": SECRET_NAME, "element": password}]
    post = [r for r in stack.hook_requests("PostToolUse") if r["detail"]["toolName"] == "useBrowserSecret"]
    assert [r["detail"]["result"] for r in post] == [{"name": SECRET_NAME, "origin": origin, "success": True}]
    assert_no_canary(orjson.dumps(chunks), where="the stream")
    assert_no_canary(orjson.dumps(stack.models.requests), where="model requests")
    assert_no_canary(b"".join(r.body for r in stack.receiver.requests), where="hook bodies")
    assert_no_canary(await everything_stored(stack), where="the database")
    assert_no_canary(b"".join(facts), where="NATS")


def _lookalikes(site: LoginSite) -> list[tuple[str, str, str]]:
    """(case, page URL, which password field: "" on the page, "f1" in its frame)."""
    a, b = site.port_a, site.port_b
    login_b = site.url("/login", host="other.test", port=b)
    return [
        ("suffix domain", f"https://login.test.evil.test:{a}/login", ""),
        ("userinfo", f"https://login.test@evil.test:{a}/login", ""),
        ("http downgrade", f"http://login.test:{site.http_port}/login", ""),
        ("IDN homograph", f"https://l\u043egin.test:{a}/login", ""),
        ("trailing dot", f"https://login.test.:{a}/login", ""),
        ("port change", f"https://login.test:{b}/login", ""),
        ("other host, same server", f"https://127.0.0.1:{a}/login", ""),
        ("iframe of another origin", site.url(f"/framed?child={login_b}"), "f1"),
        (
            "bound frame in another page",
            site.url(f"/framed?child={site.url('/login')}", host="other.test", port=b),
            "f1",
        ),
        ("subdomain", f"https://www.login.test:{a}/login", ""),
    ]


async def test_look_alike_origins_get_no_fill(stack: Stack, site: LoginSite) -> None:
    await bind_canary(stack, site)
    site.submissions.clear()
    results = []
    async with bridge(stack, f"lookalike-{uuid.uuid4().hex[:8]}") as b:
        for case, url, frame in _lookalikes(site):
            await b.op("browser_navigate", url=url)
            snapshot = await b.text("browser_snapshot")
            password = ref_of(snapshot, "Password")
            assert password.startswith(frame), (case, password)
            answer = await b.use_secret(password)
            await b.op("browser_click", target=ref_of(snapshot, "Sign in"))
            results.append((case, answer.success))
        # A redirect after the ref was taken: the ref now points into another origin's page (or nowhere).
        await b.op("browser_navigate", url=site.url("/login"))
        password = ref_of(await b.text("browser_snapshot"), "Password")
        await b.op("browser_navigate", url=site.url(f"/redirect?to=https://evil.test:{site.port_a}/login"))
        answer = await b.use_secret(password)
        results.append(("redirect after the ref", answer.success))
        assert_no_canary(str(results))
    assert [case for case, success in results if success] == []
    assert len(results) >= 11
    assert _filled(site) == 0


async def test_a_css_selector_is_refused_as_element(stack: Stack, site: LoginSite) -> None:
    await bind_canary(stack, site)
    async with bridge(stack, f"selector-{uuid.uuid4().hex[:8]}") as b:
        await b.op("browser_navigate", url=site.url("/login"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await b.use_secret("#password")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ref" in (refused.value.details() or "")


async def test_typing_or_filling_a_stored_secret_is_refused(stack: Stack, site: LoginSite) -> None:
    value = f"typed-secret-{uuid.uuid4().hex}"
    async with stack.client() as client:
        body = {"resourceId": "popagent-user", "name": "typed", "value": value}
        (await client.post("/api/secrets", json=body)).raise_for_status()
        origin = site.url("").rstrip("/")
        (await client.post("/api/secrets/popagent-user/typed/origins", json={"origin": origin})).raise_for_status()
    async with bridge(stack, f"typing-{uuid.uuid4().hex[:8]}") as b:
        await b.op("browser_navigate", url=site.url("/login"))
        password = ref_of(await b.text("browser_snapshot"), "Password")
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("browser_type", {"target": password, "text": value}),
            ("browser_fill_form", {"fields": [{"target": password, "name": "p", "type": "textbox", "value": value}]}),
        ]
        for operation, arguments in attempts:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await b.op(operation, **arguments)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "use useBrowserSecret" in (refused.value.details() or "")


def _image(answer: Any) -> bytes:
    [image] = [part.data for part in answer.content if part.kind == "image"]
    return image


async def test_a_secret_filled_into_a_text_field_shows_dots_in_screenshots(stack: Stack, site: LoginSite) -> None:
    """Pixels cannot be scrubbed: the filled field is masked in the page itself, so a screenshot
    (the model's, or the UI's screencast) shows only as many discs as the value has characters:
    two secrets of the same length look alike, whichever is filled."""
    origin = await bind_canary(stack, site)
    look_alike = "".join("x" if c != "x" else "y" for c in CANARY)
    async with stack.client() as client:
        body = {"resourceId": "popagent-user", "name": "same-length", "value": look_alike}
        (await client.post("/api/secrets", json=body)).raise_for_status()
        bound = await client.post("/api/secrets/popagent-user/same-length/origins", json={"origin": origin})
        assert bound.status_code in (200, 409), bound.text
    shots: list[bytes] = []
    async with bridge(stack, f"masked-{uuid.uuid4().hex[:8]}") as b:
        await b.op("browser_navigate", url=site.url("/login"))
        user = ref_of(await b.text("browser_snapshot"), "User")
        for name in (SECRET_NAME, "same-length"):
            assert (await b.use_secret(user, name=name)).success
            answer = await b.op("browser_take_screenshot", type="png", scale="css", target=user, element="User")
            shots.append(_image(answer))
    assert shots[0] == shots[1]


async def test_browser_tools_that_ask_fill_and_click_nothing_until_a_person_answers(
    stack: Stack, site: LoginSite
) -> None:
    """The browser and secrets groups (docs/approvals.md): a denied fill leaves the field empty and never
    reaches the bridge, an approved click runs once, and with the secrets group only the fill asks."""
    await bind_canary(stack, site)
    async with stack.client() as client:
        for rules, fill_answer, asked in (
            ([{"group": "browser", "decision": "ask"}], "deny", ["bifrostNavigator", "useBrowserSecret"]),
            ([{"group": "secrets", "decision": "ask"}], "approve", ["useBrowserSecret"]),
        ):
            site.submissions.clear()
            stack.reset()
            session = await new_session(client)
            async with bridge(stack, session) as b:
                await b.op("browser_navigate", url=site.url("/login"))
                snapshot = await b.text("browser_snapshot")
            password, submit = ref_of(snapshot, "Password"), ref_of(snapshot, "Sign in")
            click = {"operation": "browser_click", "arguments": {"target": submit}}
            stack.models.push(
                Turn.call(ToolCall("useBrowserSecret", {"name": SECRET_NAME, "element": password}, id="c-fill")),
                Turn.call(ToolCall("bifrostNavigator", click, id="c-click")),
                Turn.say("Done."),
            )
            async with supervisor_policy(client, rules):
                # The stream ends where the turn waits (docs/approvals.md); the turn goes on as it is answered.
                chunks = await chat(client, session, "sign in")
                [fill] = await pending(client, session)
                assert (fill["toolName"], fill["toolCallId"]) == ("useBrowserSecret", "c-fill")
                assert site.submissions == []
                await answer_approval(client, fill["id"], fill_answer, "not now" if fill_answer == "deny" else "")
                if "bifrostNavigator" in asked:
                    [waiting] = await pending(client, session)
                    assert waiting["toolCallId"] == "c-click"
                    assert site.submissions == []  # nothing was clicked while the click waited
                    await answer_approval(client, waiting["id"], "approve")
                await turn_ended(stack, session)
            listed = (await client.get("/api/approvals", params={"sessionId": session})).json()["approvals"]
            assert sorted(a["toolName"] for a in listed) == asked
            assert len(site.submissions) == 1
            assert _filled(site) == (1 if fill_answer == "approve" else 0)
            fills = [r for r in stack.hook_requests("PostToolUse") if r["detail"]["toolName"] == "useBrowserSecret"]
            assert len(fills) == (1 if fill_answer == "approve" else 0)
            _, assistant = await recorded_turn(stack, session)
            states = {p["toolCallId"]: p["state"] for p in assistant["parts"] if "toolCallId" in p}
            assert states == {
                "c-fill": "output-denied" if fill_answer == "deny" else "output-available",
                "c-click": "output-available",
            }
            assert_no_canary(orjson.dumps([chunks, assistant]), where="the stream and the stored answer")


async def turn_ended(stack: Stack, session: str) -> None:
    async def running() -> int:
        async with stack.db() as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM popagent_turns WHERE session_id = $1 AND status IN ('running', 'queued')",
                session,
            )
        assert isinstance(count, int)
        return count

    await eventually(running, until=lambda count: count == 0, within=60, what="the turn to end")
