"""An OTLP/HTTP trace receiver on 127.0.0.1 for tests: what a collector would get, decoded with
opentelemetry-proto, and the raw bodies kept for a search of what must never be in them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from scrapefleet.common import tracing


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    start_ns: int
    end_ns: int
    error: bool
    service: str


@dataclass
class Receiver:
    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        by_trace: dict[str, list[ReceivedSpan]] = {}
        with self.lock:
            for span in self.spans:
                by_trace.setdefault(span.trace_id, []).append(span)
        return by_trace

    def named(self, name: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def raw(self) -> bytes:
        with self.lock:
            return b"".join(self.bodies)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        error=span.status.code == 2,  # STATUS_CODE_ERROR
                        service=str(resource.get("service.name", "")),
                    )
                )
    return found


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver, and tracing turned on in this process towards it (and off at the end: what
    was buffered is exported first)."""
    with serving() as receiver:
        tracing.shutdown()  # whatever an earlier test left on
        endpoint = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url}
        try:
            assert tracing.start("scrapefleet-test", endpoint)
            yield receiver
        finally:
            tracing.shutdown()


@contextmanager
def serving() -> Iterator[Receiver]:
    """A receiver on a free port of 127.0.0.1 (its ``url``), until the end."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            code = 200
            try:
                spans = decode(body)
            except Exception:
                code, spans = 400, []
            with receiver.lock:
                receiver.bodies.append(body)
                receiver.spans.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_port}/v1/traces"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
