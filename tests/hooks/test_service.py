"""The hooks service over real gRPC: Dispatch, the digest fast path, the gateway route, the real process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from hooks.helpers import (
    HOOKS_MIGRATIONS,
    SPEC_EXAMPLE,
    RecordingAuth,
    document,
    handler,
    running_service,
    service_env,
)

from popagent.hooks.v1 import hooks_pb2, hooks_pb2_grpc
from popagent_core.grpc_client import check_health, open_channel
from popagent_dev.embedded import free_port
from popagent_hooks_client.client import HookDecision, HooksClient, _decision_from
from popagent_hooks_client.events import Event, Outcome
from support.https_receiver import HttpsReceiver, answer, closed_port, make_secret, verify_signature
from support.waiting import START_WITHIN_S, TEST_WITH_A_START_S, eventually, exited

DatabaseFactory = Callable[..., Awaitable[str]]
Credentials = tuple[dict[str, str], str]


@pytest.fixture
async def hooks_dsn(make_database: DatabaseFactory) -> str:
    return await make_database(HOOKS_MIGRATIONS)


def policy_document(receiver: HttpsReceiver) -> str:
    receiver.script("/limit", lambda r: answer("modify", replacement={**r.json()["detail"]["arguments"], "limit": 1}))
    receiver.script("/shell", answer("deny", reason="no shell here", additionalContext="use getTime instead"))
    receiver.script("/observe", answer())
    return document(
        PreToolUse=[
            handler("limit", receiver.url("/limit"), matcher=["webSearch"], timeoutMs=1500),
            handler("shell", receiver.url("/shell"), matcher=["shell"], failureMode="open"),
        ],
        PostToolUse=[handler("observe", receiver.url("/observe"))],
    )


async def test_dispatch_over_grpc(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, receiver, policy_document(receiver))
    async with running_service(env, tokens["agent-runner"]) as (_, channel):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        digest = await stub.GetConfigDigest(hooks_pb2.GetConfigDigestRequest())
        modified = await stub.Dispatch(
            hooks_pb2.DispatchRequest(
                event=hooks_pb2.PRE_TOOL_USE,
                session_id="s1",
                turn_id="turn-1",
                tool_call_id="call-1",
                target="webSearch",
                event_id="event-1",
                detail_json=b'{"arguments": {"query": "q", "limit": 10}}',
            )
        )
        denied = await stub.Dispatch(
            hooks_pb2.DispatchRequest(event=hooks_pb2.PRE_TOOL_USE, session_id="s1", turn_id="turn-2", target="shell")
        )
        runs = (await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="s1"))).runs

    assert modified.outcome == hooks_pb2.MODIFY
    assert json.loads(modified.modified_arguments_json) == {"query": "q", "limit": 1}
    assert not modified.HasField("modified_prompt")
    assert (modified.event_id, modified.handlers_run, modified.config_digest) == ("event-1", 1, digest.digest)
    assert (denied.outcome, denied.reason, denied.decided_by) == (hooks_pb2.DENY, "no shell here", "shell")
    assert denied.additional_context == "use getTime instead"
    assert [(r.turn_id, r.handler_id, r.outcome, r.event_id or "") for r in runs] == [
        ("turn-1", "limit", hooks_pb2.MODIFY, "event-1"),
        ("turn-2", "shell", hooks_pb2.DENY, denied.event_id),
    ]
    assert [
        (e.event, [(h.id, list(h.matchers), h.timeout_ms, h.fail_closed) for h in e.handlers]) for e in digest.events
    ] == [
        (hooks_pb2.PRE_TOOL_USE, [("limit", ["webSearch"], 1500, True), ("shell", ["shell"], 2000, False)]),
        (hooks_pb2.POST_TOOL_USE, [("observe", [], 2000, False)]),
    ]


async def test_bad_requests_and_unknown_callers_are_refused(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials
) -> None:
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, None, None)
    async with running_service(env, tokens["tasks"]) as (running, channel):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        bad = [
            hooks_pb2.DispatchRequest(),
            hooks_pb2.DispatchRequest(event=hooks_pb2.STOP, detail_json=b"[1, 2]"),
            hooks_pb2.DispatchRequest(event=hooks_pb2.STOP, detail_json=b"{not json"),
            hooks_pb2.DispatchRequest(event=hooks_pb2.STOP, session_id="x" * 201),
            hooks_pb2.DispatchRequest(event=hooks_pb2.STOP, event_id="id\r\nx-injected: 1"),
        ]
        for request in bad:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Dispatch(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        async with open_channel(f"127.0.0.1:{running.port}", "intruder.not-a-real-token") as other:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await hooks_pb2_grpc.HooksServiceStub(other).GetConfigDigest(hooks_pb2.GetConfigDigestRequest())
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_client_makes_no_rpc_when_no_handler_matches(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, receiver, policy_document(receiver))
    counting = RecordingAuth(tokens["agent-runner"])
    async with running_service(env, tokens["agent-runner"]) as (running, _):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}", interceptors=[counting])
        try:
            client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
            skipped = [
                await client.dispatch(Event.SESSION_START, session_id="s"),
                await client.dispatch(Event.PRE_TOOL_USE, session_id="s", target="getTime"),
                await client.dispatch(Event.STOP, session_id="s"),
                await client.dispatch(Event.PRE_TOOL_USE, session_id="s", target="websearch"),
            ]
            assert counting.methods == ["/popagent.hooks.v1.HooksService/GetConfigDigest"]
            matched = await client.dispatch(
                Event.PRE_TOOL_USE, session_id="s", target="webSearch", detail={"arguments": {"limit": 5}}
            )
            observed = await client.dispatch(Event.POST_TOOL_USE, session_id="s", target="anyTool")
        finally:
            await channel.close()
    assert all(d.outcome is Outcome.PASS and d.handlers_run == 0 for d in skipped)
    assert counting.methods.count("/popagent.hooks.v1.HooksService/Dispatch") == 2
    assert counting.methods.count("/popagent.hooks.v1.HooksService/GetConfigDigest") == 1
    assert (matched.outcome, matched.arguments, matched.handlers_run) == (Outcome.MODIFY, {"limit": 1}, 1)
    assert (observed.outcome, observed.handlers_run) == (Outcome.PASS, 1)


async def test_the_client_applies_failure_modes_when_the_service_is_unreachable(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    async with open_channel(f"127.0.0.1:{closed_port()}", tokens["agent-runner"]) as nowhere:
        never_reached = HooksClient(hooks_pb2_grpc.HooksServiceStub(nowhere))
        gate = await never_reached.dispatch(Event.PRE_TOOL_USE, target="webSearch")
        stop = await never_reached.dispatch(Event.STOP)
        observer = await never_reached.dispatch(Event.POST_TOOL_USE, target="webSearch")
    assert (gate.outcome, gate.failure_class) == (Outcome.DENY, "transport")
    assert stop.outcome is Outcome.CONTINUE
    assert observer.outcome is Outcome.PASS

    # With a digest cached before the outage, each handler's own failure mode decides.
    env = service_env(hooks_dsn, nats_url, callers, receiver, policy_document(receiver))
    async with running_service(env, tokens["agent-runner"]) as (running, _):
        port = running.port
        async with open_channel(f"127.0.0.1:{port}", tokens["agent-runner"]) as channel:
            client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
            assert await client.matching(Event.PRE_TOOL_USE, "shell")
    async with open_channel(f"127.0.0.1:{port}", tokens["agent-runner"]) as channel:
        client.stub = hooks_pb2_grpc.HooksServiceStub(channel)
        open_only = await client.dispatch(Event.PRE_TOOL_USE, target="shell")
        closed = await client.dispatch(Event.PRE_TOOL_USE, target="webSearch")
        unmatched = await client.dispatch(Event.PRE_TOOL_USE, target="getTime")
    assert open_only.outcome is Outcome.PASS
    assert (closed.outcome, closed.failure_class) == (Outcome.DENY, "transport")
    assert unmatched.outcome is Outcome.PASS


async def test_the_client_fails_a_refused_gate_dispatch_closed_and_passes_a_refused_observation(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    """The fail-closed rule lives in the client: a dispatch the service refuses never reaches the caller as an error."""
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, receiver, policy_document(receiver))
    async with running_service(env, tokens["agent-runner"]) as (_, channel):
        client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
        # The service refuses an event id outside header-safe characters (InvalidArgument).
        shell = await client.dispatch(Event.PRE_TOOL_USE, target="shell", event_id="bad id")
        observed = await client.dispatch(Event.POST_TOOL_USE, target="webSearch", event_id="bad id")
        healthy = await client.dispatch(Event.PRE_TOOL_USE, target="shell")
    # `shell` is fail-open, yet the handlers never ran: a refused gate dispatch is closed.
    assert (shell.outcome, shell.failure_class, shell.handlers_run) == (Outcome.DENY, "transport", 0)
    assert shell.reason.startswith("hook dispatch failed: ")
    assert (observed.outcome, observed.handlers_run) == (Outcome.PASS, 0)
    assert (healthy.outcome, healthy.reason) == (Outcome.DENY, "no shell here")
    assert len(receiver.requests_for("/shell")) == 1


API_KEY = "k" * 32


@contextlib.asynccontextmanager
async def gateway_http(hooks_port: int, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway app in-process, its hooks address pointing at the running hooks service."""
    from popagent_gateway.app import create_app
    from popagent_gateway.settings import Settings as GatewaySettings

    gateway_env = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": token,
        "POPAGENT_HOOKS_ADDR": f"127.0.0.1:{hooks_port}",
    }
    settings = GatewaySettings(**gateway_env)  # type: ignore[arg-type]
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http,
    ):
        yield http


async def test_gateway_route_lists_the_session_audit_chronologically(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, receiver, policy_document(receiver))
    async with running_service(env, tokens["agent-runner"]) as (running, channel):
        client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
        for turn, target in (("t1", "webSearch"), ("t1", "shell"), ("t2", "webSearch")):
            await client.dispatch(
                Event.PRE_TOOL_USE,
                session_id="chat-1",
                turn_id=turn,
                tool_call_id=f"{turn}-{target}",
                target=target,
                detail={"arguments": {}},
            )
        async with gateway_http(running.port, tokens["gateway"]) as http:
            response = await http.get("/api/sessions/chat-1/hooks", headers={"x-popagent-key": API_KEY})
            empty = await http.get("/api/sessions/nobody/hooks", headers={"x-popagent-key": API_KEY})
            unauthorized = await http.get("/api/sessions/chat-1/hooks")
    assert response.status_code == 200, response.text
    runs: list[dict[str, Any]] = response.json()["runs"]
    assert [(r["turnId"], r["event"], r["handlerId"], r["outcome"], r["target"]) for r in runs] == [
        ("t1", "PreToolUse", "limit", "modify", "webSearch"),
        ("t1", "PreToolUse", "shell", "deny", "shell"),
        ("t2", "PreToolUse", "limit", "modify", "webSearch"),
    ]
    assert runs[1]["reason"] == "no shell here" and runs[1]["failureClass"] is None
    assert runs[1]["toolCallId"] == "t1-shell" and runs[0]["sessionId"] == "chat-1"
    assert [r["signed"] for r in runs] == [True, True, True]
    assert [r["createdAt"] for r in runs] == sorted(r["createdAt"] for r in runs)
    assert empty.status_code == 200 and empty.json() == {"runs": []}
    assert unauthorized.status_code == 401


def test_the_client_maps_an_ask_from_the_proto() -> None:
    assert Outcome.from_proto(hooks_pb2.ASK) is Outcome.ASK and Outcome.ASK.proto == hooks_pb2.ASK
    asked = _decision_from(
        hooks_pb2.DispatchResponse(
            outcome=hooks_pb2.ASK,
            reason="confirm the purchase",
            decided_by="approval",
            modified_arguments_json=b'{"amount": 5}',
            handlers_run=2,
            event_id="e-1",
        )
    )
    assert asked == HookDecision(
        Outcome.ASK,
        reason="confirm the purchase",
        arguments={"amount": 5},
        handlers_run=2,
        decided_by="approval",
        event_id="e-1",
    )
    unchanged = _decision_from(hooks_pb2.DispatchResponse(outcome=hooks_pb2.ASK, reason="r", decided_by="a"))
    assert (unchanged.outcome, unchanged.arguments, unchanged.prompt) == (Outcome.ASK, None, None)


async def test_an_ask_reaches_the_client_with_the_modified_arguments_and_the_gateway_lists_it(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/approval", answer("ask", reason="a person confirms purchases"))
    receiver.script("/limit", lambda r: answer("modify", replacement={**r.json()["detail"]["arguments"], "limit": 1}))
    hooks = document(
        PreToolUse=[handler("approval", receiver.url("/approval")), handler("limit", receiver.url("/limit"))]
    )
    env = service_env(hooks_dsn, nats_url, callers, receiver, hooks)
    async with running_service(env, tokens["agent-runner"]) as (running, channel):
        client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
        decision = await client.dispatch(
            Event.PRE_TOOL_USE,
            session_id="chat-ask",
            turn_id="t1",
            tool_call_id="c1",
            target="buy",
            detail={"arguments": {"item": "book", "limit": 3}},
        )
        async with gateway_http(running.port, tokens["gateway"]) as http:
            response = await http.get("/api/sessions/chat-ask/hooks", headers={"x-popagent-key": API_KEY})
    assert (decision.outcome, decision.reason, decision.decided_by, decision.failure_class) == (
        Outcome.ASK,
        "a person confirms purchases",
        "approval",
        "",
    )
    assert decision.arguments == {"item": "book", "limit": 1}
    assert decision.handlers_run == 2
    assert response.status_code == 200, response.text
    assert [(r["handlerId"], r["outcome"], r["reason"]) for r in response.json()["runs"]] == [
        ("approval", "ask", "a person confirms purchases"),
        ("limit", "modify", ""),
    ]


@dataclass
class RealProcess:
    """A running `python -m popagent_hooks`; `returncode` and `stderr` are set once it has exited."""

    channel: Any
    returncode: int | None = None
    stderr: str = ""


@contextlib.asynccontextmanager
async def real_process(env: dict[str, str], token: str) -> AsyncIterator[RealProcess]:
    """The hooks process with `env`, healthy, and a channel to it; SIGTERM when the block ends."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
    full_env.update(env, POPAGENT_HOOKS_ADDR=f"127.0.0.1:{port}")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "popagent_hooks", env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        async with open_channel(f"127.0.0.1:{port}", token) as channel:

            async def healthy() -> bool:
                if await check_health(channel, timeout_s=0.2):
                    return True
                assert process.returncode is None, "the service exited during start-up"
                return False

            await eventually(healthy, within=START_WITHIN_S, what="the hooks service to become healthy")
            running = RealProcess(channel)
            yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await exited(process, what="the hooks service to stop")
    running.returncode, running.stderr = process.returncode, stderr.decode()[-2000:]


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_the_real_process_dispatches_signed_requests_and_stops_cleanly(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    secret = make_secret()
    receiver.script("/gate", answer("deny", reason="from the real process"))
    hooks = document(UserPromptSubmit=[handler("gate", receiver.url("/gate"), secret=secret)])
    env = service_env(hooks_dsn, nats_url, callers, receiver, hooks)
    async with real_process(env, tokens["agent-runner"]) as process:
        client = HooksClient(hooks_pb2_grpc.HooksServiceStub(process.channel))
        decision = await client.dispatch(
            Event.USER_PROMPT_SUBMIT, session_id="s", turn_id="t", detail={"prompt": "hello"}
        )
    assert (decision.outcome, decision.reason) == (Outcome.DENY, "from the real process")
    (request,) = receiver.requests
    assert verify_signature(request, secret)
    assert request.json()["detail"] == {"prompt": "hello"}
    assert process.returncode == 0, process.stderr


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_the_real_process_accepts_the_spec_example_configuration(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials
) -> None:
    """`POPAGENT_HOOKS` exactly as docs/hooks.md (Configuration) shows it: no `secret`, so unsigned."""
    tokens, callers = internal_credentials
    env = service_env(hooks_dsn, nats_url, callers, None, SPEC_EXAMPLE, POPAGENT_HOOK_ALLOWED_HOSTS="hooks.example.com")
    async with real_process(env, tokens["agent-runner"]) as process:
        digest = await hooks_pb2_grpc.HooksServiceStub(process.channel).GetConfigDigest(
            hooks_pb2.GetConfigDigestRequest()
        )
    assert [
        (e.event, [(h.id, sorted(h.matchers), h.timeout_ms, h.fail_closed) for h in e.handlers]) for e in digest.events
    ] == [(hooks_pb2.PRE_TOOL_USE, [("tool-policy", ["remember", "useBrowserSecret"], 2000, True)])]
    assert process.returncode == 0, process.stderr


async def test_an_unsigned_handler_gets_no_signature_and_its_audit_row_says_unsigned(
    hooks_dsn: str, nats_url: str, internal_credentials: Credentials, receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    secret = make_secret()
    receiver.script("/signed", answer())
    receiver.script("/plain", answer())
    hooks = document(
        UserPromptSubmit=[
            handler("signed", receiver.url("/signed"), secret=secret),
            handler("plain", receiver.url("/plain"), secret=None),
        ]
    )
    env = service_env(hooks_dsn, nats_url, callers, receiver, hooks)
    async with running_service(env, tokens["agent-runner"]) as (_, channel):
        client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
        decision = await client.dispatch(
            Event.USER_PROMPT_SUBMIT, session_id="s", turn_id="t", detail={"prompt": "hello"}
        )
        runs = (
            await hooks_pb2_grpc.HooksServiceStub(channel).ListSessionRuns(
                hooks_pb2.ListSessionRunsRequest(session_id="s")
            )
        ).runs
    assert (decision.outcome, decision.handlers_run) == (Outcome.PASS, 2)
    (signed,) = receiver.requests_for("/signed")
    (plain,) = receiver.requests_for("/plain")
    assert verify_signature(signed, secret)
    assert "webhook-signature" not in plain.headers
    assert plain.headers["webhook-id"] == f"{decision.event_id}.plain" and plain.headers["webhook-timestamp"]
    assert [(r.handler_id, r.signed) for r in runs] == [("signed", True), ("plain", False)]
