"""The OpenTelemetry SDK's side of common.tracing, imported only once tracing is turned on (so
that with it off, or without the ``otel`` extra, none of the SDK is ever loaded)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def traces_endpoint(environ: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL the standard variables name (the signal's own wins; the
    general one gets the signal's path, as the specification says)."""
    own = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if own:
        return own
    return environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/") + "/v1/traces"


def provider(service_name: str, environ: Mapping[str, str]) -> TracerProvider:
    """A provider exporting in batches (off the job's thread) to the configured endpoint; the
    process's global one too, so that an action's own spans join the job's trace."""
    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    made = TracerProvider(resource=Resource.create(attributes))
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(traces_endpoint(environ))))
    if environ is os.environ and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(made)
    return made
