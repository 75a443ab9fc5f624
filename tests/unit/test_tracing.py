"""common.tracing without I/O: the traceparent's shape, what a span may carry, when tracing is
on, that off it loads nothing, and the spans a submit and an attempt make (in memory)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scrapefleet.common import tracing, tracing_jobs
from scrapefleet.common.store import ClaimedJob, NewJob
from scrapefleet.common.tracing_names import SPANS

ROOT = Path(__file__).resolve().parents[2]
GOOD = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        "00-" + "ab" * 16 + "-" + "cd" * 8 + "-00",  # not sampled: still a traceparent
    ],
)
def test_a_w3c_traceparent_is_one(text: str) -> None:
    assert tracing.is_traceparent(text)


@pytest.mark.parametrize(
    "text",
    [
        None,
        42,
        "",
        "junk",
        GOOD.upper(),
        GOOD + " ",
        "01" + GOOD[2:],  # a version we do not know
        "00-" + "0" * 32 + "-" + "cd" * 8 + "-01",  # all-zero ids are invalid
        "00-" + "ab" * 16 + "-" + "0" * 16 + "-01",
        "00-" + "ab" * 15 + "-" + "cd" * 8 + "-01",
    ],
)
def test_anything_else_is_not(text: Any) -> None:
    assert not tracing.is_traceparent(text)


def test_a_new_traceparent_is_one_and_new() -> None:
    made = {tracing.new_traceparent() for _ in range(100)}
    assert len(made) == 100 and all(tracing.is_traceparent(t) for t in made)


def test_the_database_check_is_the_same_shape() -> None:
    from scrapefleet.common.db.job_tables import TRACEPARENT_PATTERN

    assert re.sub("[()]", "", tracing.TRACEPARENT_RE.pattern) == TRACEPARENT_PATTERN


@pytest.mark.parametrize(
    ("url", "keep_query", "shown"),
    [
        (
            "https://u:pw@shop.example:8443/a/b?token=s3cret#frag",
            False,
            "https://shop.example:8443/a/b",
        ),
        (
            "https://u:pw@shop.example/a?token=s3cret#frag",
            True,
            "https://shop.example/a?token=s3cret",
        ),
        ("http://[::1]:80/x?y", False, "http://[::1]:80/x"),
        ("http://[bad", False, "(not a URL)"),
    ],
)
def test_a_url_never_shows_its_user_info_nor_unless_allowed_its_query(
    url: str, keep_query: bool, shown: str
) -> None:
    assert tracing.scrubbed_url(url, keep_query=keep_query) == shown


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
    ],
)
def test_tracing_is_wanted_only_with_an_endpoint(environ: dict[str, str], wanted: bool) -> None:
    assert tracing.tracing_wanted(environ) is wanted


def test_the_traces_endpoint_follows_the_specification() -> None:
    from scrapefleet.common.tracing_sdk import traces_endpoint

    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == (
        "http://c:4318/v1/traces"
    )
    assert (
        traces_endpoint(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "x",
            }
        )
        == "x"
    )


def test_off_the_daemons_load_no_opentelemetry_at_all() -> None:
    """The no-cost path: importing the daemons, starting tracing without an endpoint and
    running through every helper import nothing of OpenTelemetry."""
    code = (
        "import sys\n"
        "import scrapefleet.consumer.daemon, scrapefleet.producer.producer_daemon\n"
        "import scrapefleet.common.api\n"
        "from scrapefleet.common import tracing, tracing_jobs\n"
        "assert not tracing.start('x') and not tracing.start_for_client('x')\n"
        "with tracing.span('a') as s, tracing.job_span('b', None), tracing.navigating('http://a'):\n"
        "    s.set(x=1)\n"
        "with tracing_jobs.running(None, 'h') as run:\n"
        "    assert run.ended('o') == 'o'\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_an_endpoint_without_the_sdk_warns_and_stays_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "scrapefleet.common.tracing_sdk", None)  # not installed
    tracing.shutdown()
    assert not tracing.start("x", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert "not installed" in caplog.text and not tracing.active()


def test_every_span_the_code_makes_is_in_the_reference_and_back() -> None:
    sources = [
        "common/tracing.py",
        "common/tracing_jobs.py",
        "consumer/runner.py",
        "consumer/browser/actions/selenium_actions.py",
    ]
    used = set()
    for source in sources:
        text = (ROOT / source).read_text()
        used |= set(re.findall(r'"(scrapefleet\.(?!common|consumer|producer)[a-z_.]+)"', text))
    assert used == set(SPANS)


@dataclass
class InMemory:
    exporter: InMemorySpanExporter

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def in_memory() -> Iterator[InMemory]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.shutdown()
    tracing._on = tracing._On(provider.get_tracer("test"), provider)
    try:
        yield InMemory(exporter)
    finally:
        tracing.shutdown()


def test_each_submitted_job_is_a_trace_of_its_own_under_its_callers_span(
    in_memory: InMemory,
) -> None:
    on = tracing._on
    assert on is not None
    jobs = [NewJob("noop"), NewJob("noop", traceparent=GOOD), NewJob("noop", traceparent="bad")]
    with (
        on.tracer.start_as_current_span("caller") as caller,
        tracing_jobs.submitting(jobs) as traced,
    ):
        pass
    submits = [s for s in in_memory.spans() if s.name == "scrapefleet.submit"]
    assert len(submits) == 3 and all(tracing.is_traceparent(j.traceparent) for j in traced)
    mine, given, bad = submits
    caller_id = caller.get_span_context().span_id
    assert mine.parent.span_id == caller_id and bad.parent.span_id == caller_id
    assert given.parent.trace_id == int("ab" * 16, 16)  # a job's own traceparent wins
    assert f"{mine.context.span_id:016x}" in traced[0].traceparent


def test_a_bulk_submit_is_one_span_each_jobs_trace_linked_to_it(
    in_memory: InMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing_jobs, "SUBMIT_SPANS_MAX", 2)
    with tracing_jobs.submitting(
        [NewJob("noop"), NewJob("noop", traceparent=GOOD), NewJob("x")]
    ) as jobs:
        pass
    [submit] = in_memory.spans()
    assert submit.attributes["scrapefleet.jobs"] == 3
    link = tracing.traceparent_of(submit)
    assert [job.trace_link for job in jobs] == [link] * 3
    assert jobs[1].traceparent == GOOD and len({job.traceparent for job in jobs}) == 3
    assert all(tracing.is_traceparent(job.traceparent) for job in jobs)


def test_a_span_whose_work_raises_names_the_class_never_the_message(
    in_memory: InMemory,
) -> None:
    with pytest.raises(ValueError), tracing.navigating("https://a.example/?token=s3cret"):
        raise ValueError("loading https://a.example/?token=s3cret: timed out")
    [page] = in_memory.spans()
    assert page.attributes["error.type"] == "ValueError" and not page.status.is_ok
    assert page.status.description == "ValueError" and not page.events
    assert "s3cret" not in repr(dict(page.attributes))


def test_a_submit_that_raises_ends_its_spans_as_errors(in_memory: InMemory) -> None:
    with pytest.raises(RuntimeError), tracing_jobs.submitting([NewJob("noop")]):
        raise RuntimeError("the database said no")
    [submit] = in_memory.spans()
    assert not submit.status.is_ok


@dataclass(frozen=True)
class Ended:
    status: str
    retryable: bool = True
    error_class: Any = None


def test_an_attempt_is_its_claim_its_run_and_its_write(in_memory: InMemory) -> None:
    job = ClaimedJob(7, "noop", {}, 1, 2, None, claim=3, traceparent=GOOD)
    tracing_jobs.claimed([job], "h1", began_ns=1)
    with tracing_jobs.running(job, "h1") as run, tracing.span("inner"):
        logged = logging.LogRecord("x", logging.INFO, "", 0, "line", None, None)
        tracing.LogTraceIds().filter(logged)
        run.ended(Ended("failed", error_class="transient"))
    tracing_jobs.result_written([job], "h1", began_ns=2, error=None)
    spans = {s.name: s for s in in_memory.spans()}
    attempt, claim, run_span = (spans[f"scrapefleet.{n}"] for n in ("attempt", "claim", "run"))
    write, inner = spans["scrapefleet.result_write"], spans["inner"]
    assert attempt.parent.span_id == int("cd" * 8, 16)
    assert claim.parent.span_id == run_span.parent.span_id == attempt.context.span_id
    assert write.parent.span_id == attempt.context.span_id
    assert inner.parent.span_id == run_span.context.span_id
    assert attempt.attributes["scrapefleet.outcome"] == "retry"
    assert attempt.attributes["scrapefleet.error_class"] == "transient"
    assert logged.sf_span_id == f"{inner.context.span_id:016x}"  # type: ignore[attr-defined]
    assert not tracing._on.attempts and not tracing._on.written  # type: ignore[union-attr]


@dataclass(frozen=True)
class Finished:
    job: ClaimedJob


class Recorder:
    host = "h1"

    def __init__(self) -> None:
        self.lines: list[logging.LogRecord] = []

    @tracing_jobs.result_write
    def write(self, conn: Any, item: Any) -> None:
        line = logging.LogRecord("x", logging.WARNING, "", 0, "blocked", None, None)
        tracing.LogTraceIds().filter(line)
        self.lines.append(line)
        if conn == "fails":
            raise RuntimeError("the connection dropped")


def test_one_attempts_write_is_the_current_span_and_a_failed_one_is_tried_again_under_it(
    in_memory: InMemory,
) -> None:
    job = ClaimedJob(8, "noop", {}, 1, 1, None, claim=1, traceparent=GOOD)
    tracing_jobs.claimed([job], "h1", began_ns=1)
    with tracing_jobs.running(job, "h1") as run:
        run.ended(Ended("completed"))
    recorder = Recorder()
    with pytest.raises(RuntimeError):
        recorder.write("fails", Finished(job))
    recorder.write("ok", Finished(job))
    writes = [s for s in in_memory.spans() if s.name == "scrapefleet.result_write"]
    [attempt] = [s for s in in_memory.spans() if s.name == "scrapefleet.attempt"]
    assert [w.status.is_ok for w in writes] == [False, True]
    assert {w.parent.span_id for w in writes} == {attempt.context.span_id}
    ids = [(line.sf_trace_id, line.sf_span_id) for line in recorder.lines]  # type: ignore[attr-defined]
    assert ids == [(f"{w.context.trace_id:032x}", f"{w.context.span_id:016x}") for w in writes]
    assert not tracing._on.written  # type: ignore[union-attr]


def test_any_flags_of_a_traceparent_are_read_as_hex(in_memory: InMemory) -> None:
    for flags, sampled in (("0a", False), ("ff", True), ("00", False), ("03", True)):
        job = ClaimedJob(9, "noop", {}, 1, 1, None, traceparent=GOOD[:-2] + flags)
        tracing_jobs.claimed([job], "h1", began_ns=1)
        with tracing_jobs.running(job, "h1"):
            pass
        attempts = [s for s in in_memory.spans() if s.name == "scrapefleet.attempt"]
        assert len(attempts) == (1 if sampled else 0)  # the SDK's sampler follows the parent
        in_memory.exporter.clear()


def test_a_tracing_helper_that_fails_is_a_warning_never_the_daemons_error(
    in_memory: InMemory, caplog: pytest.LogCaptureFixture
) -> None:
    tracing_jobs.claimed([object()], "h1", began_ns=1)  # no .id, .traceparent...: it fails
    assert "tracing: claimed failed" in caplog.text


def test_a_submit_whose_spans_cannot_be_made_still_submits_every_job(
    in_memory: InMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the program's own provider is broken")

    monkeypatch.setattr(tracing._on.tracer, "start_span", broken)  # type: ignore[union-attr]
    with tracing_jobs.submitting([NewJob("noop"), NewJob("noop", traceparent="bad")]) as jobs:
        pass
    assert len(jobs) == 2 and jobs[1].traceparent is None  # store.insert_jobs: a random one


def test_open_attempts_are_bounded(in_memory: InMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing_jobs, "MAX_OPEN_ATTEMPTS", 2)
    jobs = [ClaimedJob(i, "noop", {}, 1, 1, None, claim=1) for i in range(5)]
    tracing_jobs.claimed(jobs, "h1", began_ns=1)
    assert list(tracing._on.attempts) == [(3, 1), (4, 1)]  # type: ignore[union-attr]
    pushed_out = [s for s in in_memory.spans() if s.name == "scrapefleet.attempt"]
    assert len(pushed_out) == 3  # ended, not lost


def test_a_program_that_traces_has_its_own_sdk_used_for_the_submits() -> None:
    """The Python API in a program that set up its own SDK: its provider takes the spans
    (nothing of ours is started), and its current span is each submit's parent."""
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import"
        " InMemorySpanExporter\n"
        "from scrapefleet.common import tracing, tracing_jobs\n"
        "from scrapefleet.common.store import NewJob\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "assert tracing.start_for_client('x') and tracing._on.provider is None\n"
        "with trace.get_tracer('app').start_as_current_span('request') as request:\n"
        "    with tracing_jobs.submitting([NewJob('noop')]) as jobs:\n"
        "        pass\n"
        "[submit] = [s for s in exporter.get_finished_spans() if s.name == 'scrapefleet.submit']\n"
        "assert submit.parent.span_id == request.get_span_context().span_id\n"
        "print(jobs[0].traceparent.split('-')[2] == f'{submit.context.span_id:016x}')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr
