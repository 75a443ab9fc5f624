"""One OpenTelemetry trace per job, from its submit to its webhook: off unless configured.

A job's trace is carried in its row (``jobs.traceparent``, W3C trace context, migration 0037):
the submit's span when the submitter traces, else a random one, so that the producer's and the
consumers' spans for one job always share a trace. Spans (their names and attributes are
``common.tracing_names``, from which the reference page is generated):

    scrapefleet.submit                       per job (one per bulk submit), child of the
                                             caller's current span
    scrapefleet.assign                       per assignment: from pending to queued on a host
    scrapefleet.attempt                      per attempt: from its claim to its outcome
      scrapefleet.claim                      the claim statement
      scrapefleet.run                        the action in its thread
        scrapefleet.browser.lease            a session for the job (new or reused)
        scrapefleet.browser.navigate         the page load
        scrapefleet.browser.fields           the page read
        scrapefleet.browser.artifacts        a failed attempt's screenshots and HTML
      scrapefleet.result_write               the outcome written (after the attempt's end)
    scrapefleet.webhook                      each delivery of the job's webhook

A spawned job's trace is its own, with a link to its parent's (``jobs.trace_link``).

Tracing is on when the OpenTelemetry SDK is installed (``scrapefleet[otel]``) and the standard
variables name an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` turn it off), or, for the Python API, when the calling program
has set up its own SDK. Off, every helper here is one check of a module global: no module of
OpenTelemetry is imported and no span made (a submit still gives each job a random trace).

What a span carries is bounded and never a secret: no payload, no proxy or credential, a URL
without its user info, query and fragment (setting ``trace_full_urls`` keeps the query).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import logging
import os
import random
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

TRACEPARENT_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
ATTRIBUTE_MAX_CHARS = 256
# Attempt spans opened at a claim and not yet run (a stop can drop queued work): bounded.
MAX_OPEN_ATTEMPTS = 10_000


def is_traceparent(text: object) -> bool:
    """A W3C traceparent of version 00 whose ids are not all zeros."""
    if not isinstance(text, str):
        return False
    match = TRACEPARENT_RE.match(text)
    return match is not None and set(match.group(1)) != {"0"} and set(match.group(2)) != {"0"}


def new_traceparent() -> str:
    """A new trace (sampled): ids as random as the SDK's own (``random``, not ``secrets``:
    an id is no secret, and a bulk submit makes one per job)."""
    ids = random.randbytes(24).hex()  # an all-zero id (invalid) once in 2**64: not guarded
    return "00-" + ids[:32] + "-" + ids[32:] + "-01"


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces sent to an OTLP endpoint."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def scrubbed_url(url: str, *, keep_query: bool = False) -> str:
    """``url`` for a span: never its user info (a proxy's or a site's password) nor its
    fragment, and its query only when asked (tokens ride there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "(not a URL)"
    query = parts.query if keep_query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))[:ATTRIBUTE_MAX_CHARS]


# -- state: None while off, so that every helper's first line is one check -------------------


@dataclass
class _On:
    tracer: Any
    provider: Any  # ours to flush and shut down; None when the program's own
    keep_query: bool = False
    attempts: dict[tuple[int, int], Any] = field(default_factory=dict)  # open attempt spans
    written: dict[tuple[int, int], Any] = field(default_factory=dict)  # ended, result unwritten
    lock: threading.Lock = field(default_factory=threading.Lock)


_on: _On | None = None
_start_lock = threading.Lock()
F = TypeVar("F", bound=Callable[..., Any])


def active() -> bool:
    return _on is not None


def start(
    service_name: str,
    environ: Mapping[str, str] | None = None,
    *,
    keep_query: bool = False,
) -> bool:
    """Turn tracing on for this process if the environment asks for it and the SDK is
    installed (a warning if not); idempotent. Whether it is on."""
    global _on
    environ = os.environ if environ is None else environ
    with _start_lock:
        if _on is not None:
            return True
        if not tracing_wanted(environ):
            return False
        try:
            tracing_sdk = importlib.import_module("scrapefleet.common.tracing_sdk")
        except ImportError as exc:
            log.warning(
                "an OTLP endpoint is configured but the OpenTelemetry SDK is not installed"
                " (pip install 'scrapefleet[otel]'); tracing stays off: %s",
                exc,
            )
            return False
        provider = tracing_sdk.provider(service_name, environ)
        _on = _On(provider.get_tracer("scrapefleet"), provider, keep_query)
        atexit.register(shutdown)
        log.info("tracing on: spans exported over OTLP/HTTP (service %s)", service_name)
        return True


def start_for_client(service_name: str, *, keep_query: bool = False) -> bool:
    """The Python API: the calling program's own SDK when it has set one up (its spans are the
    submits' parents), else as ``start``."""
    global _on
    if _on is not None:
        return True
    api = sys.modules.get("opentelemetry.trace")  # never imported here: a program that
    if api is not None:  # traces has imported it already
        provider = api.get_tracer_provider()
        if type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider"):
            with _start_lock:
                if _on is None:
                    _on = _On(provider.get_tracer("scrapefleet"), None, keep_query)
            return True
    return start(service_name, keep_query=keep_query)


def shutdown() -> None:
    """Export what is buffered and turn tracing off (a test starts it again)."""
    global _on
    with _start_lock:
        on, _on = _on, None
    if on is not None and on.provider is not None:
        on.provider.shutdown()


def flush() -> None:
    on = _on
    if on is not None and on.provider is not None:
        on.provider.force_flush()


def never_raises(func: F) -> F:
    """A tracing helper a daemon calls on its own path (the claim, the assignment, the
    recorder): whatever goes wrong in it is a warning, never the daemon's error."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            log.warning("tracing: %s failed, spans lost: %s", func.__name__, type(exc).__name__)
            return None

    return wrapper  # type: ignore[return-value]


# -- spans ------------------------------------------------------------------------------------


class _NoSpan:
    def set(self, **attributes: Any) -> None:
        pass


class Span:
    """The handle a helper yields: attributes set on it are bounded and named."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def set(self, **attributes: Any) -> None:
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(_key(key), _value(value))


NO_SPAN = _NoSpan()
_OFF: contextlib.nullcontext[_NoSpan] = contextlib.nullcontext(NO_SPAN)


def _key(name: str) -> str:
    """Ours under ``scrapefleet.``; OpenTelemetry's semantic conventions as they are."""
    if name.startswith(("url.", "server.")):
        return name
    return "scrapefleet." + name


def _value(value: Any) -> Any:
    if isinstance(value, bool | int | float):
        return value
    return str(value)[:ATTRIBUTE_MAX_CHARS]


def span_attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {_key(k): _value(v) for k, v in values.items() if v is not None}


def parent_context(traceparent: str | None) -> Any:
    """A context whose span is the remote ``traceparent`` (None: the current one)."""
    if not is_traceparent(traceparent):
        return None
    from opentelemetry import trace

    assert traceparent is not None
    _, trace_id, span_id, flags = traceparent.split("-")
    context = trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16) & trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


def links_to(trace_link: str | None) -> list[Any]:
    parent = parent_context(trace_link)
    if parent is None:
        return []
    from opentelemetry import trace

    return [trace.Link(trace.get_current_span(parent).get_span_context())]


def traceparent_of(span: Any) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@contextlib.contextmanager
def _span(
    on: _On,
    name: str,
    parent: Any = None,
    links: Sequence[Any] = (),
    start_ns: int | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    with on.tracer.start_as_current_span(
        name,
        context=parent,
        links=list(links),
        start_time=start_ns,
        attributes=span_attributes(attributes or {}),
        record_exception=False,  # its message can hold a URL's query, a page's text
        set_status_on_exception=False,
    ) as span:
        try:
            yield Span(span)
        except BaseException as exc:
            failed(span, exc)
            raise


def failed(span: Any, exc: BaseException) -> None:
    """``span`` ended by ``exc``: an error with its class's name, never its message (a URL with
    its query, a page's text, a credential an action put there)."""
    from opentelemetry.trace import Status, StatusCode

    name = type(exc).__name__
    span.set_attribute("error.type", name)
    span.set_status(Status(StatusCode.ERROR, name))


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Span | _NoSpan]:
    """A child of the current span (the attempt's run, in a job's thread)."""
    on = _on
    if on is None:
        return _OFF
    return _span(on, name, attributes=attributes)


def job_span(
    name: str,
    traceparent: str | None,
    trace_link: str | None = None,
    start_ns: int | None = None,
    **attributes: Any,
) -> contextlib.AbstractContextManager[Span | _NoSpan]:
    """A span in the job's own trace (a child of its row's ``traceparent``)."""
    on = _on
    if on is None:
        return _OFF
    return _span(on, name, parent_context(traceparent), links_to(trace_link), start_ns, attributes)


def note(**attributes: Any) -> None:
    """Attributes on the current span (a session pool saying whether it reused a session)."""
    if _on is None:
        return
    from opentelemetry import trace

    Span(trace.get_current_span()).set(**attributes)


def traced(name: str) -> Callable[[F], F]:
    """A function's calls as child spans of the current one, while tracing is on."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            on = _on
            if on is None:
                return func(*args, **kwargs)
            with _span(on, name):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


class _EnterTraced:
    """Another context manager whose ``__enter__`` alone is a span (a lease: the wait for a
    session is the span, the job that runs in it is not)."""

    def __init__(
        self, on: _On, inner: contextlib.AbstractContextManager[Any], name: str, isolation: str
    ) -> None:
        self.inner, self.on, self.name, self.isolation = inner, on, name, isolation

    def __enter__(self) -> Any:
        with _span(self.on, self.name, attributes={"isolation": self.isolation}):
            return self.inner.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.inner.__exit__(*exc)


def entering(
    inner: contextlib.AbstractContextManager[Any], name: str, isolation: str
) -> contextlib.AbstractContextManager[Any]:
    """``inner`` with its entry as the span ``name`` (a browser lease, its ``isolation``)."""
    on = _on
    return inner if on is None else _EnterTraced(on, inner, name, isolation)


def navigating(url: str) -> contextlib.AbstractContextManager[Span | _NoSpan]:
    """A page load's span: the URL without its user info, and without its query unless the
    setting ``trace_full_urls`` keeps it."""
    on = _on
    if on is None:
        return _OFF
    full = scrubbed_url(url, keep_query=on.keep_query)
    return _span(on, "scrapefleet.browser.navigate", attributes={"url.full": full})


# -- submits ---------------------------------------------------------------------------------


def submit_traceparent(given: object) -> str | None:
    """``given`` when it is a traceparent, else None (a malformed one is the caller's mistake,
    never a reason to lose a job: the job starts a trace of its own)."""
    if given is None or is_traceparent(given):
        return given  # type: ignore[return-value]
    log.warning(
        "ignoring a malformed traceparent %r (not 00-<32 hex>-<16 hex>-<2 hex>); the job"
        " starts a trace of its own",
        given[:80] if isinstance(given, str) else given,
    )
    return None


class LogTraceIds(logging.Filter):
    """The current span's trace and span id on every log line written within it (the fields
    ``trace_id`` and ``span_id``), so that a job's lines and its trace find each other."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _on is not None:
            from opentelemetry import trace

            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                record.sf_trace_id = f"{context.trace_id:032x}"
                record.sf_span_id = f"{context.span_id:016x}"
        return True
