"""With the standard OTLP variables set, spans also go to any OTLP/HTTP collector."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from popagent_core.telemetry import NamedStatementSpans, build_provider, tracing_enabled


class OtlpReceiver:
    """The collector side of OTLP over HTTP (protobuf `POST /v1/traces`), on a free loopback port."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf":
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[str, str, bytes, bytes]]:
        """(service.name, span name, trace id, span id) of everything received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"
                )
                for scope_spans in resource_spans.scope_spans:
                    found += [(service, s.name, s.trace_id, s.span_id) for s in scope_spans.spans]
        return found


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_the_otlp_collector_receives_the_same_spans_as_the_store(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    local = InMemorySpanExporter()
    provider = build_provider("tests-otlp", processors=(SimpleSpanProcessor(local),))
    tracer = provider.get_tracer("popagent")
    with tracer.start_as_current_span("agent.run"), tracer.start_as_current_span("model.generation"):
        pass
    provider.shutdown()  # flushes the batch processor

    expected = sorted(
        ("popagent-tests-otlp", s.name, s.context.trace_id.to_bytes(16, "big"), s.context.span_id.to_bytes(8, "big"))
        for s in local.get_finished_spans()
        if s.context is not None
    )
    assert len(expected) == 2
    assert sorted(receiver.spans()) == expected


def test_without_the_variables_nothing_is_exported_over_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    provider = build_provider("tests-otlp")
    processors = provider._active_span_processor._span_processors  # type: ignore[attr-defined]
    # Only the one that names statement spans: nothing that exports.
    assert [type(p) for p in processors] == [NamedStatementSpans]
    provider.shutdown()


def test_the_standard_switch_turns_tracing_off() -> None:
    assert tracing_enabled({})
    assert not tracing_enabled({"OTEL_SDK_DISABLED": "true"})
    assert tracing_enabled({"OTEL_SDK_DISABLED": "false"})
