"""A tiny OTLP/HTTP trace receiver on loopback: accepts `POST /v1/traces` with a protobuf
`ExportTraceServiceRequest` (gzip or not), decodes it with the official protobuf classes
(opentelemetry-proto) and keeps every span with its resource's attributes. What the real
exporter sends, read as a collector reads it."""

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.http import FakeHTTPServer


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(key_values) -> dict:
    return {item.key: _value(item.value) for item in key_values}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict
    events: tuple[tuple[str, dict], ...]
    status_code: int
    status_message: str
    resource: dict

    def strings(self) -> list[str]:
        """Every text the span carries: names, attribute values, events, status, resource."""
        texts = [self.name, self.status_message]
        for mapping in (self.attributes, self.resource, *(attrs for _, attrs in self.events)):
            texts += [str(key) for key in mapping] + [str(value) for value in mapping.values()]
        texts += [name for name, _ in self.events]
        return texts


class OTLPCollector:
    def __init__(self):
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        self._server = FakeHTTPServer(("127.0.0.1", 0), _Handler, fake=self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "OTLPCollector":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()

    def receive(self, body: bytes, content_type: str) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            events=tuple(
                                (event.name, _attributes(event.attributes)) for event in span.events
                            ),
                            status_code=span.status.code,
                            status_message=span.status.message,
                            resource=resource,
                        )
                    )
        with self._lock:
            self.posts += 1
            self.content_types.append(content_type)
            self.spans.extend(received)

    def wait_for(self, predicate, timeout: float = 30.0) -> list[ReceivedSpan]:
        """The spans received once `predicate(spans)` holds; AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            time.sleep(0.1)
        raise AssertionError(f"the spans wanted did not arrive: {[s.name for s in spans]}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.fake.receive(body, self.headers.get("Content-Type", ""))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
