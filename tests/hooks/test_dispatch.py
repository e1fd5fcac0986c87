"""The dispatch contract against a real HTTPS receiver: order, matching, mutation, caps, failure modes."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from hooks.helpers import handler

from popagent_hooks.dispatcher import Decision, Dispatcher, EventInput
from popagent_hooks_client.events import Event, FailureClass, Outcome, closed_outcome
from support.https_receiver import (
    HttpsReceiver,
    ReceivedRequest,
    Reply,
    answer,
    closed_port,
    make_secret,
    sized_answer,
    verify_signature,
)
from support.waiting import run_queue_wait_s

DispatcherFor = Callable[..., Dispatcher]
KIB = 1024


def tool_event(target: str = "webSearch", **detail: Any) -> EventInput:
    return EventInput(
        Event.PRE_TOOL_USE,
        session_id="session-1",
        turn_id="turn-1",
        tool_call_id="call-1",
        model="fake/fake-chat",
        target=target,
        detail=detail or {"arguments": {"query": "weather", "limit": 3}},
    )


def paths(receiver: HttpsReceiver) -> list[str]:
    return [r.path for r in receiver.requests]


async def test_handlers_run_sequentially_in_declaration_order(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    for name in ("first", "second", "third"):
        receiver.script(f"/{name}", answer("pass"))
    dispatcher = dispatcher_for(
        PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in ("third", "first", "second")],
    )
    decision = await dispatcher.dispatch(tool_event())
    assert paths(receiver) == ["/third", "/first", "/second"]
    assert [r.handler_id for r in decision.runs] == ["third", "first", "second"]
    assert decision.outcome is Outcome.PASS
    # Sequential: each request arrived after the previous one was answered.
    times = [r.received_at for r in receiver.requests]
    assert times == sorted(times)


async def test_only_handlers_whose_matcher_lists_the_exact_key_run(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/all", answer())
    receiver.script("/remember", answer())
    receiver.script("/web", answer())
    dispatcher = dispatcher_for(
        PreToolUse=[
            handler("all", receiver.url("/all")),
            handler("remember", receiver.url("/remember"), matcher=["remember"]),
            handler("web", receiver.url("/web"), matcher=["webSearch"]),
        ]
    )
    await dispatcher.dispatch(tool_event("remember"))
    await dispatcher.dispatch(tool_event("remember-tool"))
    await dispatcher.dispatch(tool_event("websearch"))
    assert paths(receiver) == ["/all", "/remember", "/all", "/all"]
    nothing = await dispatcher.dispatch(EventInput(Event.POST_TOOL_USE, target="remember"))
    assert nothing.handlers_run == 0 and len(receiver.requests) == 4


async def test_a_prompt_mutation_becomes_the_next_handlers_input(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/a", lambda r: answer("modify", replacement=r.json()["detail"]["prompt"] + " +a"))
    receiver.script("/b", answer("pass"))
    receiver.script("/c", lambda r: answer("modify", replacement=r.json()["detail"]["prompt"] + " +c"))
    dispatcher = dispatcher_for(
        UserPromptSubmit=[handler(n, receiver.url(f"/{n}")) for n in ("a", "b", "c")],
    )
    decision = await dispatcher.dispatch(
        EventInput(Event.USER_PROMPT_SUBMIT, session_id="s", turn_id="t", detail={"prompt": "hello"})
    )
    seen = [r.json()["detail"]["prompt"] for r in receiver.requests]
    assert seen == ["hello", "hello +a", "hello +a"]
    assert decision.outcome is Outcome.MODIFY
    assert decision.prompt == "hello +a +c"
    assert decision.arguments is None


async def test_an_argument_mutation_is_chained_and_keeps_json_types(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/a", lambda r: answer("modify", replacement={**r.json()["detail"]["arguments"], "limit": 1}))
    receiver.script("/b", answer("pass"))
    dispatcher = dispatcher_for(PreToolUse=[handler("a", receiver.url("/a")), handler("b", receiver.url("/b"))])
    decision = await dispatcher.dispatch(tool_event())
    assert receiver.requests[1].json()["detail"]["arguments"] == {"query": "weather", "limit": 1}
    assert decision.outcome is Outcome.MODIFY
    assert decision.arguments == {"query": "weather", "limit": 1}
    assert decision.arguments is not None and type(decision.arguments["limit"]) is int


async def test_a_deny_ends_the_chain_and_discards_earlier_mutations(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/mutate", answer("modify", replacement={"query": "x"}, additionalContext="from mutate"))
    receiver.script("/deny", answer("deny", reason="not today", additionalContext="from deny"))
    receiver.script("/never", answer("pass"))
    dispatcher = dispatcher_for(
        PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in ("mutate", "deny", "never")],
    )
    decision = await dispatcher.dispatch(tool_event())
    assert paths(receiver) == ["/mutate", "/deny"]
    assert (decision.outcome, decision.reason, decision.decided_by) == (Outcome.DENY, "not today", "deny")
    assert decision.arguments is None and decision.failure_class is None
    assert decision.additional_context == "from mutate\nfrom deny"
    assert [(r.handler_id, r.outcome) for r in decision.runs] == [("mutate", Outcome.MODIFY), ("deny", Outcome.DENY)]


async def test_stop_continue_ends_the_chain_with_the_reason(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/check", answer("continue", reason="cite your sources"))
    receiver.script("/never", answer("pass"))
    dispatcher = dispatcher_for(Stop=[handler("check", receiver.url("/check")), handler("n", receiver.url("/never"))])
    decision = await dispatcher.dispatch(EventInput(Event.STOP, session_id="s", turn_id="t", detail={"text": "done"}))
    assert (decision.outcome, decision.reason, decision.decided_by) == (Outcome.CONTINUE, "cite your sources", "check")
    assert paths(receiver) == ["/check"]


async def test_a_tool_ask_goes_on_and_decides_ask_with_the_first_askers_reason(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/ask", answer("ask", reason="spends money", additionalContext="from ask"))
    receiver.script("/quiet", answer("ask"))
    receiver.script("/after", answer("pass"))
    dispatcher = dispatcher_for(PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in ("ask", "quiet", "after")])
    decision = await dispatcher.dispatch(tool_event())
    assert paths(receiver) == ["/ask", "/quiet", "/after"]
    assert (decision.outcome, decision.reason, decision.decided_by) == (Outcome.ASK, "spends money", "ask")
    assert decision.arguments is None and decision.failure_class is None
    assert decision.additional_context == "from ask"
    assert [(r.handler_id, r.outcome, r.reason) for r in decision.runs] == [
        ("ask", Outcome.ASK, "spends money"),
        ("quiet", Outcome.ASK, ""),
        ("after", Outcome.PASS, ""),
    ]

    receiver.script("/quiet", answer("ask"))
    unexplained = await dispatcher_for(PreToolUse=[handler("quiet", receiver.url("/quiet"))]).dispatch(tool_event())
    assert (unexplained.outcome, unexplained.reason) == (Outcome.ASK, "hook quiet answered ask")


async def test_a_deny_after_an_ask_wins(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/ask", answer("ask", reason="check with the user"))
    receiver.script("/deny", answer("deny", reason="never"))
    receiver.script("/never", answer("ask"))
    dispatcher = dispatcher_for(PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in ("ask", "deny", "never")])
    decision = await dispatcher.dispatch(tool_event())
    assert paths(receiver) == ["/ask", "/deny"]
    assert (decision.outcome, decision.reason, decision.decided_by) == (Outcome.DENY, "never", "deny")
    assert [(r.handler_id, r.outcome) for r in decision.runs] == [("ask", Outcome.ASK), ("deny", Outcome.DENY)]


async def test_a_closed_failure_after_an_ask_denies(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/ask", answer("ask", reason="check with the user"))
    dispatcher = dispatcher_for(
        PreToolUse=[handler("ask", receiver.url("/ask")), handler("down", f"https://127.0.0.1:{closed_port()}/hook")]
    )
    decision = await dispatcher.dispatch(tool_event())
    assert (decision.outcome, decision.failure_class, decision.decided_by) == (
        Outcome.DENY,
        FailureClass.TRANSPORT,
        "down",
    )


@pytest.mark.parametrize("ask_first", [True, False], ids=["ask-then-modify", "modify-then-ask"])
async def test_an_ask_carries_the_arguments_a_handler_modified(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor, ask_first: bool
) -> None:
    receiver.script("/ask", answer("ask", reason="confirm the search"))
    receiver.script("/limit", lambda r: answer("modify", replacement={**r.json()["detail"]["arguments"], "limit": 1}))
    order = ("ask", "limit") if ask_first else ("limit", "ask")
    dispatcher = dispatcher_for(PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in order])
    decision = await dispatcher.dispatch(tool_event())
    assert (decision.outcome, decision.reason, decision.decided_by) == (Outcome.ASK, "confirm the search", "ask")
    assert decision.arguments == {"query": "weather", "limit": 1}
    assert decision.prompt is None
    assert {(r.handler_id, r.outcome) for r in decision.runs} == {("ask", Outcome.ASK), ("limit", Outcome.MODIFY)}
    # The handler after a modify sees the modified arguments; an ask changes nothing.
    seen = [r.json()["detail"]["arguments"] for r in receiver.requests]
    assert seen[1] == ({"query": "weather", "limit": 3} if ask_first else {"query": "weather", "limit": 1})


@pytest.mark.parametrize(
    "event",
    [e for e in Event if e is not Event.PRE_TOOL_USE],
    ids=[e.value for e in Event if e is not Event.PRE_TOOL_USE],
)
async def test_only_pre_tool_use_may_ask(receiver: HttpsReceiver, dispatcher_for: DispatcherFor, event: Event) -> None:
    decision, _ = await _failing_dispatch(
        receiver, dispatcher_for, lambda r: answer("ask", reason="approve?"), 2000, "", event
    )
    # Gates fail closed by default (deny, continue for Stop); observers always fail open.
    assert decision.outcome is (closed_outcome(event) if event.rules.gate else Outcome.PASS)
    assert decision.runs[0].failure_class is FailureClass.EVENT_OUTCOME
    assert decision.runs[0].outcome is not Outcome.ASK
    assert "outcome ask is not allowed" in decision.runs[0].reason


async def test_an_ask_with_a_replacement_is_refused(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/ask", answer("ask", reason="approve?", replacement={"query": "other"}))
    dispatcher = dispatcher_for(PreToolUse=[handler("ask", receiver.url("/ask"))])
    decision = await dispatcher.dispatch(tool_event())
    assert (decision.outcome, decision.failure_class, decision.decided_by) == (
        Outcome.DENY,
        FailureClass.EVENT_OUTCOME,
        "ask",
    )
    assert decision.arguments is None
    assert "replacement is only accepted with outcome modify" in decision.reason


async def test_an_unknown_outcome_is_malformed_and_the_message_lists_ask(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/odd", answer("maybe"))
    decision = await dispatcher_for(PreToolUse=[handler("odd", receiver.url("/odd"))]).dispatch(tool_event())
    assert (decision.outcome, decision.failure_class) == (Outcome.DENY, FailureClass.MALFORMED_RESPONSE)
    assert "outcome must be one of pass, deny, modify, continue, ask" in decision.reason


async def test_requests_carry_the_envelope_and_a_verifiable_signature(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    secrets = {"one": make_secret(), "two": make_secret()}
    receiver.script("/one", answer())
    receiver.script("/two", answer())
    dispatcher = dispatcher_for(
        PreToolUse=[handler(n, receiver.url(f"/{n}"), secret=secrets[n]) for n in ("one", "two")],
    )
    decision = await dispatcher.dispatch(tool_event())
    first, second = receiver.requests
    body = first.json()
    assert body["schemaVersion"] == 1
    assert body["event"] == "PreToolUse"
    assert (body["sessionId"], body["turnId"], body["toolCallId"]) == ("session-1", "turn-1", "call-1")
    assert body["model"] == "fake/fake-chat"
    assert body["eventId"] == decision.event_id == second.json()["eventId"]
    assert body["detail"] == {"arguments": {"query": "weather", "limit": 3}, "toolName": "webSearch"}
    assert abs(datetime.fromisoformat(body["timestamp"]).timestamp() - time.time()) < 60
    assert verify_signature(first, secrets["one"]) and verify_signature(second, secrets["two"])
    assert not verify_signature(first, secrets["two"])
    tampered = ReceivedRequest(first.method, first.path, first.headers, first.body + b" ", first.received_at)
    assert not verify_signature(tampered, secrets["one"])
    assert first.headers["webhook-id"] != second.headers["webhook-id"]
    # Nothing but the fixed headers: no credentials, cookies or caller-supplied headers.
    assert set(first.headers) == {
        "host",
        "content-type",
        "accept",
        "accept-encoding",
        "user-agent",
        "content-length",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }


async def test_additional_context_is_combined_in_order(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/a", answer("pass", additionalContext="alpha"))
    receiver.script("/b", answer("pass"))
    receiver.script("/c", answer("pass", additionalContext="gamma"))
    dispatcher = dispatcher_for(UserPromptSubmit=[handler(n, receiver.url(f"/{n}")) for n in "abc"])
    decision = await dispatcher.dispatch(EventInput(Event.USER_PROMPT_SUBMIT, detail={"prompt": "p"}))
    assert decision.additional_context == "alpha\ngamma"
    assert decision.outcome is Outcome.PASS


# --- failure classes x failure modes -------------------------------------------------------------

FAST_MS = 300
# A decision arrives within the handler's deadline plus this, whatever the receiver does
# (well under 100 ms on an idle machine). The time the test's thread waited for a CPU is left
# out of the measure (support.waiting.run_queue_wait_s): it is what other work on a loaded
# machine costs, not the dispatcher.
DECISION_MARGIN_S = 0.3

FAILURES: list[tuple[str, FailureClass, Callable[[HttpsReceiver], Reply | None], int]] = [
    ("connection refused", FailureClass.TRANSPORT, lambda r: None, 2000),
    (
        "timeout",
        FailureClass.TIMEOUT,
        lambda r: Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, delay_s=2),
        FAST_MS,
    ),
    (
        "slow drip past the deadline",
        FailureClass.TIMEOUT,
        lambda r: Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, drip_interval_s=0.05),
        FAST_MS,
    ),
    ("malformed JSON", FailureClass.MALFORMED_RESPONSE, lambda r: Reply(raw_body=b'{"schemaVersion": 1,'), 2000),
    ("invalid UTF-8", FailureClass.MALFORMED_RESPONSE, lambda r: Reply(raw_body=b'{"reason": "\xff"}'), 2000),
    (
        "duplicate key",
        FailureClass.MALFORMED_RESPONSE,
        lambda r: Reply(raw_body=b'{"schemaVersion": 1, "outcome": "pass", "outcome": "deny"}'),
        2000,
    ),
    ("wrong schemaVersion", FailureClass.MALFORMED_RESPONSE, lambda r: answer("pass", schemaVersion=2), 2000),
    ("schemaVersion as a string", FailureClass.MALFORMED_RESPONSE, lambda r: answer("pass", schemaVersion="1"), 2000),
    ("unknown response key", FailureClass.MALFORMED_RESPONSE, lambda r: answer("pass", verdict="ok"), 2000),
    ("unknown outcome", FailureClass.MALFORMED_RESPONSE, lambda r: answer("allow"), 2000),
    ("outcome not allowed for the event", FailureClass.EVENT_OUTCOME, lambda r: answer("continue"), 2000),
    ("modify without a replacement", FailureClass.EVENT_OUTCOME, lambda r: answer("modify"), 2000),
    ("replacement of the wrong type", FailureClass.EVENT_OUTCOME, lambda r: answer("modify", replacement="x"), 2000),
    ("3xx", FailureClass.TRANSPORT, lambda r: Reply(status=302, headers={"Location": r.url("/elsewhere")}), 2000),
    ("HTTP 500", FailureClass.TRANSPORT, lambda r: Reply(status=500, json_body={}), 2000),
    (
        "wrong content type",
        FailureClass.MALFORMED_RESPONSE,
        lambda r: Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, content_type="text/plain"),
        2000,
    ),
    (
        "compressed body",
        FailureClass.MALFORMED_RESPONSE,
        lambda r: Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, headers={"Content-Encoding": "gzip"}),
        2000,
    ),
    ("oversize response at 64 KiB + 1", FailureClass.MALFORMED_RESPONSE, lambda r: sized_answer(64 * KIB + 1), 2000),
    ("never-ending chunked body", FailureClass.MALFORMED_RESPONSE, lambda r: Reply(endless_chunked=True), 5000),
    (
        "context at 16 KiB + 1",
        FailureClass.MALFORMED_RESPONSE,
        lambda r: answer("pass", additionalContext="x" * (16 * KIB + 1)),
        2000,
    ),
    ("reason over 2 KiB", FailureClass.MALFORMED_RESPONSE, lambda r: answer("deny", reason="é" * (KIB + 1)), 2000),
]


async def _failing_dispatch(
    receiver: HttpsReceiver,
    dispatcher_for: DispatcherFor,
    setup: Callable[[HttpsReceiver], Reply | None],
    timeout_ms: int,
    mode: str,
    event: Event = Event.PRE_TOOL_USE,
) -> tuple[Decision, float]:
    reply = setup(receiver)
    url = f"https://127.0.0.1:{closed_port()}/hook" if reply is None else receiver.url("/failing")
    if reply is not None:
        receiver.script("/failing", reply)
    receiver.script("/after", answer("pass", additionalContext="after ran") if event.rules.gate else answer())
    mode_field = {"failureMode": mode} if mode else {}
    dispatcher = dispatcher_for(
        **{
            event.value: [
                handler("failing", url, timeoutMs=timeout_ms, **mode_field),
                handler("after", receiver.url("/after")),
            ]
        }
    )
    started, waited_before = time.monotonic(), run_queue_wait_s()
    decision = await dispatcher.dispatch(
        EventInput(event, session_id="s", turn_id="t", target="webSearch", detail={"arguments": {}, "prompt": "p"})
    )
    return decision, time.monotonic() - started - (run_queue_wait_s() - waited_before)


@pytest.mark.parametrize(
    ("failure_class", "setup", "timeout_ms"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
async def test_closed_handler_failure_denies_and_ends_the_chain(
    receiver: HttpsReceiver,
    dispatcher_for: DispatcherFor,
    failure_class: FailureClass,
    setup: Callable[[HttpsReceiver], Reply | None],
    timeout_ms: int,
) -> None:
    decision, elapsed = await _failing_dispatch(receiver, dispatcher_for, setup, timeout_ms, "closed")
    assert decision.outcome is Outcome.DENY
    assert decision.failure_class is failure_class
    assert decision.decided_by == "failing"
    assert decision.reason.startswith(f"hook failing failed ({failure_class.value})")
    assert receiver.requests_for("/after") == []
    assert receiver.requests_for("/elsewhere") == []
    assert [(r.handler_id, r.outcome, r.failure_class) for r in decision.runs] == [
        ("failing", Outcome.DENY, failure_class)
    ]
    assert elapsed < timeout_ms / 1000 + DECISION_MARGIN_S


@pytest.mark.parametrize(
    ("failure_class", "setup", "timeout_ms"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
async def test_open_handler_failure_counts_as_a_pass_and_the_chain_goes_on(
    receiver: HttpsReceiver,
    dispatcher_for: DispatcherFor,
    failure_class: FailureClass,
    setup: Callable[[HttpsReceiver], Reply | None],
    timeout_ms: int,
) -> None:
    decision, elapsed = await _failing_dispatch(receiver, dispatcher_for, setup, timeout_ms, "open")
    assert decision.outcome is Outcome.PASS
    assert decision.failure_class is None
    assert decision.additional_context == "after ran"
    assert len(receiver.requests_for("/after")) == 1
    assert [(r.handler_id, r.outcome, r.failure_class) for r in decision.runs] == [
        ("failing", Outcome.PASS, failure_class),
        ("after", Outcome.PASS, None),
    ]
    assert elapsed < timeout_ms / 1000 + DECISION_MARGIN_S


@pytest.mark.parametrize(
    ("failure_class", "setup", "timeout_ms"), [f[1:] for f in FAILURES[:4]], ids=[f[0] for f in FAILURES[:4]]
)
async def test_gate_handlers_fail_closed_by_default(
    receiver: HttpsReceiver,
    dispatcher_for: DispatcherFor,
    failure_class: FailureClass,
    setup: Callable[[HttpsReceiver], Reply | None],
    timeout_ms: int,
) -> None:
    decision, _ = await _failing_dispatch(receiver, dispatcher_for, setup, timeout_ms, "", Event.USER_PROMPT_SUBMIT)
    assert (decision.outcome, decision.failure_class) == (Outcome.DENY, failure_class)


async def test_a_closed_stop_failure_refuses_completion_with_continue(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    decision, _ = await _failing_dispatch(receiver, dispatcher_for, lambda r: None, 2000, "closed", Event.STOP)
    assert (decision.outcome, decision.failure_class) == (Outcome.CONTINUE, FailureClass.TRANSPORT)
    opened, _ = await _failing_dispatch(receiver, dispatcher_for, lambda r: None, 2000, "open", Event.STOP)
    assert opened.outcome is Outcome.PASS


@pytest.mark.parametrize(
    "event",
    [e for e in Event if not e.rules.gate],
    ids=[e.value for e in Event if not e.rules.gate],
)
async def test_observational_events_always_fail_open(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor, event: Event
) -> None:
    decision, _ = await _failing_dispatch(
        receiver, dispatcher_for, lambda r: answer("deny", reason="no"), 2000, "", event
    )
    assert decision.outcome is Outcome.PASS
    assert decision.runs[0].failure_class is FailureClass.EVENT_OUTCOME
    assert len(receiver.requests_for("/after")) == 1


async def test_observers_cannot_add_context(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/post", answer("pass", additionalContext="sneaky"))
    dispatcher = dispatcher_for(PostToolUse=[handler("post", receiver.url("/post"))])
    decision = await dispatcher.dispatch(EventInput(Event.POST_TOOL_USE, target="webSearch"))
    assert decision.outcome is Outcome.PASS and decision.additional_context == ""
    assert decision.runs[0].failure_class is FailureClass.EVENT_OUTCOME


async def test_prompt_events_refuse_object_replacements(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/p", answer("modify", replacement={"prompt": "x"}))
    dispatcher = dispatcher_for(SubagentStart=[handler("p", receiver.url("/p"))])
    decision = await dispatcher.dispatch(EventInput(Event.SUBAGENT_START, target="researcher", detail={"prompt": "y"}))
    assert (decision.outcome, decision.failure_class) == (Outcome.DENY, FailureClass.EVENT_OUTCOME)
    assert receiver.requests[0].json()["detail"]["agentId"] == "researcher"


async def test_caps_accept_exactly_their_limit(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/body", sized_answer(64 * KIB))
    receiver.script("/context", answer("pass", additionalContext="é" * (8 * KIB)))
    receiver.script("/reason", answer("deny", reason="x" * (2 * KIB)))
    dispatcher = dispatcher_for(
        PreToolUse=[handler(n, receiver.url(f"/{n}")) for n in ("body", "context", "reason")],
    )
    decision = await dispatcher.dispatch(tool_event())
    assert decision.outcome is Outcome.DENY and decision.failure_class is None
    assert decision.reason == "x" * (2 * KIB)
    assert len(decision.additional_context.encode()) == 16 * KIB


@pytest.mark.parametrize(("second_bytes", "fits"), [(8 * KIB - 1, True), (8 * KIB, False)])
@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_combined_context_is_capped_at_16_kib(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor, second_bytes: int, fits: bool, mode: str
) -> None:
    # 8 KiB + separator + (8 KiB - 1) is exactly 16 KiB; one byte more is over.
    receiver.script("/first", answer("pass", additionalContext="a" * (8 * KIB)))
    receiver.script("/second", answer("pass", additionalContext="b" * second_bytes))
    dispatcher = dispatcher_for(
        PreToolUse=[
            handler("first", receiver.url("/first")),
            handler("second", receiver.url("/second"), failureMode=mode),
        ]
    )
    decision = await dispatcher.dispatch(tool_event())
    if fits:
        assert decision.outcome is Outcome.PASS
        assert len(decision.additional_context.encode()) == 16 * KIB
    elif mode == "closed":
        assert (decision.outcome, decision.failure_class) == (Outcome.DENY, FailureClass.MALFORMED_RESPONSE)
        assert "combined additionalContext" in decision.reason
    else:
        assert decision.outcome is Outcome.PASS
        assert decision.additional_context == "a" * (8 * KIB)
        assert decision.runs[1].failure_class is FailureClass.MALFORMED_RESPONSE


# --- redaction ---------------------------------------------------------------------------------

CANARY = "hunter2-canary-value"


@pytest.mark.parametrize("tool", ["storeSecret", "recallSecret", "updateSecret"])
async def test_retired_secret_tool_payloads_are_redacted_before_dispatch(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor, tool: str
) -> None:
    receiver.script("/pre", answer())
    receiver.script("/post", answer())
    dispatcher = dispatcher_for(
        PreToolUse=[handler("pre", receiver.url("/pre"))], PostToolUse=[handler("post", receiver.url("/post"))]
    )
    await dispatcher.dispatch(EventInput(Event.PRE_TOOL_USE, target=tool, detail={"arguments": {"value": CANARY}}))
    await dispatcher.dispatch(
        EventInput(Event.POST_TOOL_USE, target=tool, detail={"arguments": {"value": CANARY}, "result": {"v": CANARY}})
    )
    pre, post = receiver.requests
    assert pre.json()["detail"] == {"arguments": "[redacted]", "toolName": tool}
    assert post.json()["detail"] == {"arguments": "[redacted]", "result": "[redacted]", "toolName": tool}
    assert CANARY.encode() not in pre.body + post.body


async def test_use_browser_secret_payloads_carry_only_metadata(
    receiver: HttpsReceiver, dispatcher_for: DispatcherFor
) -> None:
    receiver.script("/pre", answer())
    receiver.script("/post", answer())
    receiver.script("/failed", answer())
    dispatcher = dispatcher_for(
        PreToolUse=[handler("pre", receiver.url("/pre"))],
        PostToolUse=[handler("post", receiver.url("/post"))],
        PostToolUseFailure=[handler("failed", receiver.url("/failed"))],
    )
    arguments = {"name": "github", "ref": "e42", "value": CANARY, "selector": "#password"}
    result = {"name": "github", "origin": "https://github.com", "success": True, "filled": CANARY}
    await dispatcher.dispatch(
        EventInput(Event.PRE_TOOL_USE, target="useBrowserSecret", detail={"arguments": arguments})
    )
    await dispatcher.dispatch(
        EventInput(Event.POST_TOOL_USE, target="useBrowserSecret", detail={"arguments": arguments, "result": result})
    )
    await dispatcher.dispatch(
        EventInput(Event.POST_TOOL_USE_FAILURE, target="useBrowserSecret", detail={"error": f"typed {CANARY}"})
    )
    pre, post, failed = receiver.requests
    assert pre.json()["detail"]["arguments"] == {"name": "github", "ref": "e42"}
    assert post.json()["detail"]["result"] == {"name": "github", "origin": "https://github.com", "success": True}
    assert failed.json()["detail"]["error"] == "[redacted]"
    assert CANARY.encode() not in pre.body + post.body + failed.body


async def test_other_tools_are_sent_unchanged(receiver: HttpsReceiver, dispatcher_for: DispatcherFor) -> None:
    receiver.script("/pre", answer())
    dispatcher = dispatcher_for(PreToolUse=[handler("pre", receiver.url("/pre"))])
    await dispatcher.dispatch(EventInput(Event.PRE_TOOL_USE, target="remember", detail={"arguments": {"text": CANARY}}))
    assert receiver.requests[0].json()["detail"]["arguments"] == {"text": CANARY}
