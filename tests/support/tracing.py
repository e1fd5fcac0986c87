"""Spans of the in-process stacks, collected in memory while a test asks for them.

Every service of a stack runs in the test process, so one tracer provider sees the spans of
all of them (gateway, agent-runner, hooks, tasks), carried across real gRPC and NATS. The
provider is installed the first time a test collects; outside `collecting_spans` its sampler
records nothing, so the other suites of the worker pay only for non-recording spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from popagent_core.telemetry import SAMPLER, build_provider, instrument_libraries


class _Switch(Sampler):
    """The services' own sampler while a test collects; nothing otherwise."""

    def __init__(self) -> None:
        self.on = False
        self.sampler: Sampler = SAMPLER  # what the services sample with while on
        # The (name, kind) of every span the sampler is asked about, while a test listens.
        self.asked: list[tuple[str, SpanKind | None]] | None = None

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        if self.asked is not None:
            self.asked.append((name, kind))
        sampler = self.sampler if self.on else ALWAYS_OFF
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "TestSwitch"


_switch = _Switch()
_exporter = InMemorySpanExporter()
_installed = False


def _install() -> None:
    global _installed
    if _installed:
        return
    provider = build_provider("tests", processors=(SimpleSpanProcessor(_exporter),), sampler=_switch)
    trace.set_tracer_provider(provider)
    instrument_libraries()
    _installed = True


class Spans:
    def __init__(self) -> None:
        self.exporter = _exporter

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def of_trace(self, trace_id: int) -> list[ReadableSpan]:
        return [span for span in self.all() if span.context is not None and span.context.trace_id == trace_id]


@contextlib.contextmanager
def collecting_spans(sampler: Sampler = SAMPLER) -> Iterator[Spans]:
    """The spans recorded meanwhile, the services sampling with `sampler` (theirs by default)."""
    _install()
    _exporter.clear()
    _switch.on, _switch.sampler = True, sampler
    try:
        yield Spans()
    finally:
        _switch.on, _switch.sampler = False, SAMPLER


@contextlib.contextmanager
def sampler_questions() -> Iterator[list[tuple[str, SpanKind | None]]]:
    """The (name, kind) of each span started meanwhile (whether recorded or not), in order."""
    _install()
    _switch.asked = asked = []
    try:
        yield asked
    finally:
        _switch.asked = None


def hex_trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return trace.format_trace_id(span.context.trace_id)


def pytest_configure(config: object) -> None:
    """Installed before any stack starts, so the services' exporters find the SDK provider."""
    _install()
