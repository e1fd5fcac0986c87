"""OTEL_TRACES_SAMPLER: a share of the turns traced, the same share in every process, and an unsampled turn
recording nothing anywhere."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from chat.helpers import chat, new_session, of_type, text_of
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind

from popagent_core.telemetry import SAMPLER, ratio_sampler, sampler_from
from support.model_gateway import Turn
from support.stacks import Stack
from support.tracing import collecting_spans
from support.waiting import eventually

_ids = random.Random(7)
TRACE_IDS = [_ids.getrandbits(128) or 1 for _ in range(4000)]


def kept(sampler: Sampler, kind: SpanKind, parent: otel_context.Context | None = None, name: str = "span") -> float:
    """The share of TRACE_IDS whose span of `kind` (under `parent`, or none) `sampler` records."""
    parent = parent or otel_context.Context()
    decisions = [sampler.should_sample(parent, trace_id, name, kind).decision.is_sampled() for trace_id in TRACE_IDS]
    return sum(decisions) / len(decisions)


def remote_parent(sampled: bool) -> otel_context.Context:
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
    span_context = trace.SpanContext(trace_id=1, span_id=1, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def test_the_sampler_variables_choose_the_share_of_traces_kept() -> None:
    assert sampler_from({}) is SAMPLER
    assert sampler_from({"OTEL_TRACES_SAMPLER": "parentbased_always_on"}) is SAMPLER
    quarter = sampler_from({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"})
    assert 0.22 <= kept(quarter, SpanKind.SERVER) <= 0.28
    assert (
        kept(sampler_from({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}), SpanKind.SERVER)
        == 0
    )
    assert kept(sampler_from({"OTEL_TRACES_SAMPLER": "always_off"}), SpanKind.SERVER) == 0
    # The specification's default argument is 1: every trace.
    assert kept(sampler_from({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}), SpanKind.SERVER) == 1


def test_every_process_of_a_trace_decides_alike_whatever_flag_a_caller_sent() -> None:
    quarter = ratio_sampler(0.25)
    at_the_edge = [
        quarter.should_sample(otel_context.Context(), t, "POST /api/chat", SpanKind.SERVER) for t in TRACE_IDS
    ]
    for flag in (True, False):
        # A downstream service sees the trace id with the flag of its caller, or a client that sent its own.
        downstream = [quarter.should_sample(remote_parent(flag), t, "/Chat", SpanKind.SERVER) for t in TRACE_IDS]
        assert [d.decision for d in downstream] == [e.decision for e in at_the_edge]
    # What the default sampler leaves out, the ratio sampler leaves out too.
    everything = ratio_sampler(1.0)
    assert kept(everything, SpanKind.CLIENT) == 0  # a background loop's parentless query
    assert kept(everything, SpanKind.CLIENT, remote_parent(True), name="BEGIN;") == 0
    assert kept(everything, SpanKind.CLIENT, remote_parent(True), name="SELECT") == 1


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER='sometimes' is not one of"),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
            "OTEL_TRACES_SAMPLER_ARG='1.5' must be a number from 0 to 1",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
            "OTEL_TRACES_SAMPLER_ARG='half' must be a number from 0 to 1",
        ),
    ],
)
def test_a_bad_sampler_setting_stops_the_process_with_one_line_naming_it(variables: dict[str, str], named: str) -> None:
    code = "from popagent_core.telemetry import configure_telemetry\nconfigure_telemetry('probe')\nprint('started')"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | variables
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("popagent-probe: bad configuration: ") and named in line, out.stderr


async def test_each_turn_is_recorded_in_every_service_or_in_none_as_its_trace_id_says(chat_stack: Stack) -> None:
    stack = chat_stack
    expected = TraceIdRatioBased(0.5)
    kept: list[int] = []
    dropped: list[int] = []
    async with stack.client() as client:
        session = await new_session(client)
        with collecting_spans(ratio_sampler(0.5)) as spans:
            # Until one turn of each kind was seen (all 30 alike: a chance of 2^-29).
            for n in range(30):
                stack.models.push(Turn.say(f"Answer {n}."))
                chunks = await chat(client, session, f"question {n}")
                assert text_of(chunks) == f"Answer {n}."
                [start] = of_type(chunks, "start")
                trace_id = int(start["messageMetadata"]["traceId"], 16)
                decision = expected.should_sample(otel_context.Context(), trace_id, "turn").decision
                (kept if decision.is_sampled() else dropped).append(trace_id)
                if kept and dropped:
                    break

            def kept_turns_recorded() -> bool:
                return all({"POST /api/chat", "agent.run"} <= {s.name for s in spans.of_trace(t)} for t in kept)

            await eventually(kept_turns_recorded, what="every kept turn's spans")
            recorded = spans.all()
    assert kept and dropped
    # A kept turn is recorded in the gateway and, across its gRPC call, in agent-runner.
    for trace_id in kept:
        names = {span.name for span in recorded if span.context is not None and span.context.trace_id == trace_id}
        assert {"POST /api/chat", "agent.run", "model.generation"} <= names
        assert any(name.startswith("/popagent.agent_runner") for name in names)
    # A dropped turn has no span anywhere (each span's recording is decided when it starts).
    assert not [span for span in recorded if span.context is not None and span.context.trace_id in dropped]
