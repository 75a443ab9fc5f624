"""One trace per job (common.tracing), received by a real OTLP/HTTP receiver: an HTTP job through
a real producer and consumer, its webhook, a retried attempt, a spawned job's link, a caller's
span as the submit's parent, and a malformed traceparent that loses nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from scrapefleet.common import tracing
from scrapefleet.common.actions.registry import register
from scrapefleet.common.actions.spawn import Child, Spawned
from scrapefleet.common.api import Client
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.page_server import serve_pages
from tests.integration.producer_helpers import producer_settings
from tests.integration.test_consumer import HOST, consumer_thread, make_settings
from tests.integration.webhook_receiver import Receiver
from tests.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

QUERY_SECRET = "query-secret-4fa1"
HOOK_SECRET = "hook-query-secret-77c2"
SIGNING_SECRET = "webhook-signing-secret-0123456789"
PAYLOAD_SECRET = "payload-secret-9d0e"
_flaky_seen: set[str] = set()


class FlakyParams(BaseModel):
    token: str


@register("test_trace_flaky", FlakyParams)
def flaky(params: FlakyParams) -> dict[str, Any]:
    """Fails its first attempt, completes its second."""
    if params.token not in _flaky_seen:
        _flaky_seen.add(params.token)
        raise ValueError("the first attempt fails")
    return {"ok": True}


@register("test_trace_spawner", FlakyParams, spawns=["noop"])
def spawner(params: FlakyParams) -> Spawned:
    return Spawned({"spawned": 1}, [Child("noop", {})])


@contextmanager
def fleet(tmp_path: Path, database_url: str, engine: Engine) -> Iterator[Client]:
    settings = make_settings(
        tmp_path, database_url, capacity=3, http_allow_networks=["127.0.0.0/8"]
    )
    with consumer_thread(settings, database_url):
        producer = Producer(
            producer_settings(
                database_url,
                settings.state_dir,
                webhook_secret=SIGNING_SECRET,
                webhook_interval_s=0.05,
                webhook_allow_networks=["127.0.0.0/8"],
            ),
            engine,
        )
        producer.start()
        try:
            with Client(database_url, settings) as client:
                yield client
        finally:
            producer.stop()


def finished(engine: Engine, ids: list[int]) -> bool:
    """All completed; a job failed for good fails the test at once, with its error."""
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT id, status, last_error FROM jobs WHERE id = ANY(:ids)"), {"ids": ids}
        ).all()
    failed = [f"job {r.id}: {r.last_error}" for r in found if r.status == "failed"]
    assert not failed, failed
    return sum(r.status == "completed" for r in found) == len(ids)


def row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()


def of_job(spans: list[ReceivedSpan], job_id: int) -> list[ReceivedSpan]:
    return [s for s in spans if s.attributes.get("scrapefleet.job.id") == job_id]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


class Lines(logging.Handler):
    """The log lines as a daemon's own handler sees them (with its trace ids filter)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.addFilter(tracing.LogTraceIds())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def ids_of(self, text: str) -> set[tuple[str, str]]:
        return {
            (getattr(r, "sf_trace_id", ""), getattr(r, "sf_span_id", ""))
            for r in self.records
            if text in r.getMessage()
        }


@contextmanager
def log_lines() -> Iterator[Lines]:
    lines, logger = Lines(), logging.getLogger("scrapefleet")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def test_an_http_job_its_retry_and_its_webhook_are_one_trace_each(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with (
        otlp_receiver() as otlp,
        serve_pages() as site,
        Receiver() as hooks,
        log_lines() as lines,
    ):
        site.page(f"/p?token={QUERY_SECRET}", "<title>traced</title>")
        with fleet(tmp_path, database_url, engine) as client:
            fetched = client.submit(
                "http_get",
                {"url": site.url(f"/p?token={QUERY_SECRET}"), "headers": {"x-k": PAYLOAD_SECRET}},
                callback_url=f"{hooks.url}?sig={HOOK_SECRET}",
            )
            retried = client.submit("test_trace_flaky", {"token": "a"}, max_attempts=2)
            spawning = client.submit("test_trace_spawner", {"token": "b"})
            assert fetched and retried and spawning
            child = wait_for(lambda: _child_of(engine, spawning), 30, "the spawned job")
            wait_for(lambda: finished(engine, [fetched, retried, spawning, child]), 60, "jobs")
            wait_for(lambda: len(hooks.accepted()) == 1, 30, "the webhook")
        tracing.flush()
        wait_for(lambda: otlp.named("scrapefleet.webhook"), 10, "the webhook's span")
        spans = otlp.spans

    # The HTTP job: every span of it in one trace, the submit its root.
    trace_id = row(engine, fetched).traceparent.split("-")[1]
    mine = otlp.traces()[trace_id]
    submit = one(mine, "scrapefleet.submit")
    assert submit.parent_id == "" and submit.attributes["scrapefleet.job.kind"] == "http_get"
    assert row(engine, fetched).traceparent.split("-")[2] == submit.span_id
    assign, attempt = one(mine, "scrapefleet.assign"), one(mine, "scrapefleet.attempt")
    claim, run = one(mine, "scrapefleet.claim"), one(mine, "scrapefleet.run")
    write, webhook = one(mine, "scrapefleet.result_write"), one(mine, "scrapefleet.webhook")
    assert assign.parent_id == attempt.parent_id == webhook.parent_id == submit.span_id
    assert claim.parent_id == run.parent_id == write.parent_id == attempt.span_id
    assert assign.attributes["scrapefleet.host"] == HOST
    assert assign.attributes["scrapefleet.pending_s"] >= 0
    assert attempt.attributes["scrapefleet.attempt"] == 1
    assert attempt.attributes["scrapefleet.outcome"] == "completed"
    assert attempt.start_ns <= claim.start_ns <= claim.end_ns <= run.start_ns
    assert webhook.attributes["scrapefleet.outcome"] == "delivered"
    assert {s.trace_id for s in of_job(spans, fetched)} == {trace_id}
    # The consumer's line for the attempt and the producer's for the delivery name their spans.
    assert lines.ids_of(f"job {fetched} http_get attempt 1 completed") == {(trace_id, run.span_id)}
    assert lines.ids_of("webhook delivered") == {(trace_id, webhook.span_id)}

    # The retried job: two attempts in its one trace, the first a retry with its class.
    retried_trace = otlp.traces()[row(engine, retried).traceparent.split("-")[1]]
    attempts = sorted(
        (s for s in retried_trace if s.name == "scrapefleet.attempt"),
        key=lambda s: s.attributes["scrapefleet.attempt"],
    )
    assert [a.attributes["scrapefleet.outcome"] for a in attempts] == ["retry", "completed"]
    assert attempts[0].attributes["scrapefleet.error_class"] == "transient"
    assert attempts[0].error and not attempts[1].error
    assert len([s for s in retried_trace if s.name == "scrapefleet.assign"]) == 2
    assert len({a.parent_id for a in attempts}) == 1

    # The spawned job: a trace of its own, linked to its parent's.
    child_row, parent_row = row(engine, child), row(engine, spawning)
    assert child_row.trace_link == parent_row.traceparent
    child_attempt = one(otlp.traces()[child_row.traceparent.split("-")[1]], "scrapefleet.attempt")
    parent_trace, parent_span = parent_row.traceparent.split("-")[1:3]
    assert child_attempt.links == [(parent_trace, parent_span)]

    # Nothing secret anywhere in what was exported.
    raw = otlp.raw()
    for secret in (QUERY_SECRET, HOOK_SECRET, SIGNING_SECRET, PAYLOAD_SECRET, "x-k"):
        assert secret.encode() not in raw, secret


def _child_of(engine: Engine, parent: int) -> int | None:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT id FROM jobs WHERE parent_id = :p"), {"p": parent}
        ).scalar()


def test_the_callers_span_is_the_submits_parent(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    from opentelemetry import trace

    with otlp_receiver() as otlp, Client(database_url) as client:
        on = tracing._on
        assert on is not None
        with on.tracer.start_as_current_span("caller's request") as caller:
            job_id = client.submit("noop")
        tracing.flush()
        wait_for(lambda: otlp.named("scrapefleet.submit"), 10, "the submit's span")
    assert job_id is not None
    context = caller.get_span_context()
    [submit] = otlp.named("scrapefleet.submit")
    assert submit.trace_id == f"{context.trace_id:032x}"
    assert submit.parent_id == f"{context.span_id:016x}"
    assert row(engine, job_id).traceparent.startswith(f"00-{submit.trace_id}-{submit.span_id}-")
    assert isinstance(trace.get_current_span(), trace.NonRecordingSpan)


BAD = ["junk", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "01-" + "a" * 32 + "-" + "b" * 16 + "-01"]


@pytest.mark.parametrize("bad", [*BAD, 42])
def test_a_malformed_traceparent_is_ignored_with_a_warning_never_refused(
    engine: Engine, database_url: str, caplog: pytest.LogCaptureFixture, bad: Any
) -> None:
    caplog.set_level(logging.WARNING, "scrapefleet.common.tracing")
    with Client(database_url) as client:  # tracing off: a trace of the job's own
        job_id = client.submit("noop", traceparent=bad)
        [job] = [validate_job({"kind": "noop", "traceparent": bad})]  # a job file's line
        [file_id] = client.submit_many([job]).ids
    assert job_id is not None and job.traceparent is None
    for stored in (row(engine, job_id).traceparent, row(engine, file_id).traceparent):
        assert tracing.is_traceparent(stored) and stored != bad
    warnings = [r for r in caplog.records if "malformed traceparent" in r.getMessage()]
    assert len(warnings) == 2


def test_a_good_traceparent_is_kept_and_every_insert_path_gets_one(
    engine: Engine, database_url: str
) -> None:
    given = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    with Client(database_url) as client:
        job_id = client.submit("noop", traceparent=given)
    assert row(engine, job_id).traceparent == given
    with engine.begin() as conn:  # a hand-written INSERT: the column's default
        hand = conn.execute(sa.text("INSERT INTO jobs (kind) VALUES ('noop') RETURNING id"))
        hand_id = hand.scalar_one()
        with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
            conn.execute(
                sa.text("UPDATE jobs SET traceparent = 'x' WHERE id = :id"), {"id": hand_id}
            )
    assert tracing.is_traceparent(row(engine, hand_id).traceparent)
