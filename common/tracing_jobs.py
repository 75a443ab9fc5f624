"""A job's spans (common.tracing_names names them all): its submit, an assignment on the
producer, an attempt's claim, run and result write on a consumer, a webhook delivery.

An attempt's span opens at its claim (the claiming thread) and ends with its outcome (the job's
thread); its result write comes later still (the recorder's thread), as a child of the ended
attempt. Between those threads the open spans wait here, by attempt (job id, claim), in
bounded maps: an attempt whose thread never returns cannot grow them past a bound.

Every helper does nothing, first thing, while tracing is off. A consumer's claim returns its
jobs' trace context with them; the producer's reads of it (common.reads.job_traces: after an
assignment, before a webhook's delivery) are made only while tracing is on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from scrapefleet.common import tracing
from scrapefleet.common.tracing import (
    MAX_OPEN_ATTEMPTS,
    links_to,
    parent_context,
    span_attributes,
)

# A submit of more jobs is one span for all of them, each job's trace linked to it: a span per
# job costs ~50 us of CPU each and would overflow the exporter's queue (2,048 by default).
SUBMIT_SPANS_MAX = 1_000

AttemptKey = tuple[int, int]
# job id -> (traceparent, trace_link) as its row has them
Traces = Mapping[int, tuple[str | None, str | None]]


def _bounded_put(spans: dict[AttemptKey, Any], key: AttemptKey, value: Any) -> Any:
    """Put ``value``; the oldest entry it pushed out, if the map was full."""
    spans[key] = value
    if len(spans) > MAX_OPEN_ATTEMPTS:
        return spans.pop(next(iter(spans)))
    return None


def attempt_outcome(status: str, retryable: bool, attempt: int, max_attempts: int) -> str:
    """What happens to the job after the attempt, as consumer.attempt_log says it."""
    if status == "failed" and retryable and attempt < max_attempts:
        return "retry"
    return status


@tracing.never_raises
def claimed(jobs: Sequence[Any], host: str, began_ns: int) -> None:
    """Open an attempt span per claimed job (in the trace its row carries), with its claim
    span (``began_ns``: when the claim statement was sent) as its first child."""
    on = tracing._on
    if on is None:
        return
    from opentelemetry import trace

    ended_ns = time.time_ns()
    for job in jobs:
        attempt = on.tracer.start_span(
            "scrapefleet.attempt",
            context=parent_context(job.traceparent),
            links=links_to(job.trace_link),
            start_time=began_ns,
            attributes=span_attributes(_job_attributes(job, host)),
        )
        on.tracer.start_span(
            "scrapefleet.claim",
            context=trace.set_span_in_context(attempt),
            start_time=began_ns,
            attributes=span_attributes({"host": host, "claim": job.claim}),
        ).end(end_time=ended_ns)
        with on.lock:
            pushed_out = _bounded_put(on.attempts, job.key, attempt)
        if pushed_out is not None:
            pushed_out.end()


def _job_attributes(job: Any, host: str) -> dict[str, Any]:
    return {
        "job.id": job.id,
        "job.kind": job.kind,
        "host": host,
        "attempt": job.attempt,
        "claim": job.claim,
        "profile": job.profile,
        # The pool and the leased proxy's row id: its URL carries credentials, never sent.
        "proxy_pool": job.proxy_pool,
        "proxy_id": job.proxy_id,
    }


class _Running:
    def __init__(self, job: Any, attempt: Any = None, run: Any = None) -> None:
        self.job, self.attempt, self.run = job, attempt, run

    def ended(self, outcome: Any) -> Any:
        """The attempt's outcome on its spans; returns it."""
        if self.attempt is not None:
            job = self.job
            attributes = {
                "outcome": attempt_outcome(
                    outcome.status, outcome.retryable, job.attempt, job.max_attempts
                ),
                "error_class": getattr(outcome.error_class, "value", outcome.error_class),
            }
            tracing.Span(self.attempt).set(**attributes)
            tracing.Span(self.run).set(**attributes)
            if outcome.status in ("failed", "blocked"):
                from opentelemetry.trace import Status, StatusCode

                self.attempt.set_status(Status(StatusCode.ERROR, attributes["error_class"]))
        return outcome


_NOT_RUNNING = _Running(None)


@contextlib.contextmanager
def _running(on: tracing._On, job: Any, host: str) -> Iterator[_Running]:
    from opentelemetry import trace

    with on.lock:
        attempt = on.attempts.pop(job.key, None)
    if attempt is None:  # claimed before tracing was on, or pushed out: opened now
        attempt = on.tracer.start_span(
            "scrapefleet.attempt",
            context=parent_context(job.traceparent),
            links=links_to(job.trace_link),
            attributes=span_attributes(_job_attributes(job, host)),
        )
    try:
        with (
            trace.use_span(
                attempt, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ),
            on.tracer.start_as_current_span(
                "scrapefleet.run",
                attributes=span_attributes({"host": host}),
                record_exception=False,  # what an action raised can hold anything
                set_status_on_exception=False,
            ) as run,
        ):
            yield _Running(job, attempt, run)
    finally:
        attempt.end()
        with on.lock:
            _bounded_put(on.written, job.key, attempt.get_span_context())


def running(job: Any, host: str) -> contextlib.AbstractContextManager[_Running]:
    """The attempt's run, in its thread: its span is the current one while the action runs
    (the browser's spans are its children); the attempt's span ends with it."""
    on = tracing._on
    if on is None:
        return contextlib.nullcontext(_NOT_RUNNING)
    return _running(on, job, host)


@tracing.never_raises
def result_written(jobs: Iterable[Any], host: str, began_ns: int, error: str | None) -> None:
    """A ``scrapefleet.result_write`` span per job of one write (made after it, with its
    times), each a child of its attempt's span."""
    on = tracing._on
    if on is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    jobs = list(jobs)
    ended_ns = time.time_ns()
    for job in jobs:
        with on.lock:  # a failed write is tried again: its attempt's context is kept for it
            attempt = (on.written.get if error else on.written.pop)(job.key, None)
        if attempt is None:
            continue
        span = on.tracer.start_span(
            "scrapefleet.result_write",
            context=trace.set_span_in_context(trace.NonRecordingSpan(attempt)),
            start_time=began_ns,
            attributes=span_attributes({"job.id": job.id, "host": host, "jobs": len(jobs)}),
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=ended_ns)


@tracing.never_raises
def assignments(rows: Iterable[Mapping[str, Any]]) -> None:
    """A ``scrapefleet.assign`` span per job just assigned: from when it became pending to
    now (``rows``: common.reads.job_traces.assigned_jobs)."""
    on = tracing._on
    if on is None:
        return
    now_ns = time.time_ns()
    for row in rows:
        pending_since = row["pending_since"]
        began_ns = int(pending_since.timestamp() * 1e9) if pending_since else now_ns
        began_ns = min(began_ns, now_ns)
        on.tracer.start_span(
            "scrapefleet.assign",
            context=parent_context(row["traceparent"]),
            links=links_to(row["trace_link"]),
            start_time=began_ns,
            attributes=span_attributes(
                {
                    "job.id": row["id"],
                    "job.kind": row["kind"],
                    "job.rate_key": row["rate_key"],
                    "host": row["host"],
                    "attempt": row["attempts"] + 1,
                    "profile": row["profile"],
                    "pending_s": round((now_ns - began_ns) / 1e9, 6),
                }
            ),
        ).end(end_time=now_ns)


def webhook(
    traces: Traces, job_id: int, attempt: int, receiver: str
) -> contextlib.AbstractContextManager[tracing.Span | tracing._NoSpan]:
    """One webhook delivery's span, in its job's trace."""
    traceparent, trace_link = traces.get(job_id, (None, None))
    attributes: dict[str, Any] = {
        "job.id": job_id,
        "delivery.attempt": attempt,
        "server.address": receiver,
    }
    return tracing.job_span("scrapefleet.webhook", traceparent, trace_link, **attributes)


@tracing.never_raises
def assigned_read(conn: Any, assigned: Sequence[tuple[int, str]]) -> None:
    """``assignments`` for the (job id, host) pairs an assignment wrote, read in its
    transaction, under a savepoint: a read that fails costs the spans, never the assignment."""
    if tracing._on is None or not assigned:
        return
    from scrapefleet.common.reads.job_traces import assigned_jobs

    with conn.begin_nested():
        rows = assigned_jobs(conn, [job_id for job_id, _ in assigned])
    assignments(rows)


F = TypeVar("F", bound=Callable[..., Any])


def result_write(method: F) -> F:
    """A recorder's write of outcomes (``method(self, conn, items)``, ``items`` one finished
    attempt or a list of them, each with ``.job``) as each job's ``scrapefleet.result_write``:
    one attempt's write as the current span (the recorder's lines about it carry its ids), a
    batch's as a span per job made after it."""

    @functools.wraps(method)
    def wrapper(recorder: Any, conn: Any, items: Any) -> Any:
        on = tracing._on
        if on is None:
            return method(recorder, conn, items)
        if not isinstance(items, list):
            with _writing_one(on, items.job, recorder.host):
                return method(recorder, conn, items)
        jobs = [item.job for item in items]
        began_ns = time.time_ns()
        try:
            returned = method(recorder, conn, items)
        except BaseException as exc:
            result_written(jobs, recorder.host, began_ns, type(exc).__name__)
            raise
        result_written(jobs, recorder.host, began_ns, None)
        return returned

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def _writing_one(on: tracing._On, job: Any, host: str) -> Iterator[None]:
    from opentelemetry import trace

    with on.lock:
        attempt = on.written.get(job.key)
    if attempt is None:
        yield
        return
    parent = trace.set_span_in_context(trace.NonRecordingSpan(attempt))
    attributes = {"job.id": job.id, "host": host, "jobs": 1}
    with tracing._span(on, "scrapefleet.result_write", parent, attributes=attributes):
        yield
    with on.lock:  # written: a failed write (raised past this) is tried again, under it too
        on.written.pop(job.key, None)


def delivery_traced(method: F) -> F:
    """A webhook sender's delivery (``method(self, delivery, ...)`` returning its outcome) as a
    ``scrapefleet.webhook`` span in its job's trace; the job's trace read on the sender's
    engine (``self._engine``) only while tracing is on."""

    @functools.wraps(method)
    def wrapper(sender: Any, delivery: Any, *rest: Any) -> Any:
        if tracing._on is None:
            return method(sender, delivery, *rest)
        traces = _traces_or_none(sender._engine, delivery.job_id) or {}
        with webhook(traces, delivery.job_id, delivery.attempt, delivery.receiver) as span:
            outcome = method(sender, delivery, *rest)
            span.set(outcome=outcome)
            return outcome

    return wrapper  # type: ignore[return-value]


def _checked(jobs: Sequence[Any]) -> list[Any]:
    """The jobs, a malformed traceparent (with a warning) replaced by None."""
    return [
        job
        if job.traceparent is None or tracing.is_traceparent(job.traceparent)
        else dataclasses.replace(job, traceparent=tracing.submit_traceparent(job.traceparent))
        for job in jobs
    ]


@tracing.never_raises
def _with_submit_spans(on: tracing._On, jobs: Sequence[Any], spans: list[Any]) -> list[Any]:
    """Each job with a submit span of its own (appended to ``spans``) as its traceparent."""
    traced_jobs = []
    for job in jobs:
        submit = on.tracer.start_span(
            "scrapefleet.submit",
            context=parent_context(tracing.submit_traceparent(job.traceparent)),
            attributes=span_attributes({"job.kind": job.kind, "job.rate_key": job.rate_key}),
        )
        spans.append(submit)
        traced_jobs.append(dataclasses.replace(job, traceparent=tracing.traceparent_of(submit)))
    return traced_jobs


@tracing.never_raises
def _traces_or_none(engine: Any, job_id: int) -> Traces:
    from scrapefleet.common.reads.job_traces import job_traces

    with engine.connect() as conn:
        return job_traces(conn, [job_id])


@contextlib.contextmanager
def submitting(jobs: Sequence[Any]) -> Iterator[list[Any]]:
    """The jobs, each with its ``traceparent``: with tracing on a ``scrapefleet.submit`` span
    per job (a child of the job's own traceparent if it brought one, else of the caller's
    current span), ended when the submit has; off, the one it brought (None if malformed).
    A submit of more than SUBMIT_SPANS_MAX jobs is one span, each job's trace linked to it."""
    on = tracing._on
    if on is None:  # store.insert_jobs gives a job without one a random one
        yield _checked(jobs)
        return
    if len(jobs) > SUBMIT_SPANS_MAX:
        with tracing._span(on, "scrapefleet.submit", attributes={"jobs": len(jobs)}) as batch:
            link = tracing.traceparent_of(batch.span)
            yield [
                dataclasses.replace(
                    job,
                    traceparent=tracing.submit_traceparent(job.traceparent)
                    or tracing.new_traceparent(),
                    trace_link=link,
                )
                for job in jobs
            ]
        return
    spans: list[Any] = []
    try:
        yield _with_submit_spans(on, jobs, spans) or _checked(jobs)  # failed: as if off
    except BaseException as exc:
        for submit in spans:
            tracing.failed(submit, exc)
        raise
    finally:
        for submit in spans:
            submit.end()
