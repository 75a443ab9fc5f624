"""A browser job's trace (common.tracing), received by a real OTLP/HTTP receiver: through a real
producer and a consumer with its own Grid and Chromium under Xvfb, its lease, page load, fields
and result write under its attempt; a failed page's artifacts; no cookie or query in any span."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import tracing
from scrapefleet.common.api import Client
from scrapefleet.producer.producer_daemon import Producer
from tests.browser.consumer_helpers import HOST, consumer_settings, consumer_thread, rows
from tests.browser.login_site import LoginSite
from tests.integration.producer_helpers import producer_settings
from tests.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

COOKIE_SECRET = "cookie-value-5ecret-81f"
QUERY_SECRET = "query-5ecret-c3d"


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, sorted(s.name for s in spans))
    return found[0]


def trace_of(engine: Engine, job_id: int) -> str:
    [row] = rows(engine, "SELECT traceparent FROM jobs WHERE id = :id", id=job_id)
    return str(row.traceparent.split("-")[1])


def test_a_browser_job_is_one_trace_with_its_lease_page_fields_and_write(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=1, restart_every=0)
    with otlp_receiver() as otlp, LoginSite() as site:
        with consumer_thread(settings, database_url):
            producer = Producer(producer_settings(database_url, settings.state_dir), engine)
            producer.start()
            try:
                with Client(database_url, settings) as client:
                    login = client.submit(
                        "fetch_page",
                        {
                            "url": site.url(f"/login?as={COOKIE_SECRET}&t={QUERY_SECRET}"),
                            "isolation": "session",  # a session of its own, started for it
                        },
                        max_attempts=1,
                    )
                    assert login is not None
                    wait_for(lambda: _ended(engine, [login]), 180, "the login job")
                    whoami = client.submit(
                        "fetch_page",
                        {"url": site.url("/whoami"), "fields": {"p": {"css": "p"}}},
                        max_attempts=1,
                    )
                    missing = client.submit(
                        "fetch_page", {"url": site.url(f"/nope?q={QUERY_SECRET}")}, max_attempts=1
                    )
                    assert whoami is not None and missing is not None
                    wait_for(lambda: _ended(engine, [whoami, missing]), 180, "the jobs")
            finally:
                producer.stop()
        tracing.flush()
        traces = otlp.traces()
        raw = otlp.raw()

    statuses = {
        r.id: r.status
        for r in rows(
            engine, "SELECT id, status FROM jobs WHERE id = ANY(:ids)", ids=[login, whoami, missing]
        )
    }
    assert statuses == {login: "completed", whoami: "completed", missing: "failed"}

    spans = traces[trace_of(engine, whoami)]
    submit, assign = one(spans, "scrapefleet.submit"), one(spans, "scrapefleet.assign")
    attempt, claim = one(spans, "scrapefleet.attempt"), one(spans, "scrapefleet.claim")
    run, write = one(spans, "scrapefleet.run"), one(spans, "scrapefleet.result_write")
    lease, page = (
        one(spans, "scrapefleet.browser.lease"),
        one(spans, "scrapefleet.browser.navigate"),
    )
    fields = one(spans, "scrapefleet.browser.fields")
    assert submit.parent_id == "" and assign.parent_id == attempt.parent_id == submit.span_id
    assert claim.parent_id == run.parent_id == write.parent_id == attempt.span_id
    assert lease.parent_id == page.parent_id == fields.parent_id == run.span_id
    assert lease.end_ns <= page.start_ns <= page.end_ns <= fields.start_ns
    assert attempt.attributes["scrapefleet.host"] == HOST
    assert attempt.attributes["scrapefleet.outcome"] == "completed"
    assert lease.attributes["scrapefleet.session"] in ("new", "reused")
    assert page.attributes["url.full"] == site.url("/whoami")

    # The first job started a session of its own; its URL is shown without its query.
    first = traces[trace_of(engine, login)]
    assert one(first, "scrapefleet.browser.lease").attributes["scrapefleet.session"] == "new"
    assert one(first, "scrapefleet.browser.navigate").attributes["url.full"] == site.url("/login")

    # A failed page: its artifacts under its run, its attempt an error with its class.
    failed = traces[trace_of(engine, missing)]
    failed_run, failed_attempt = one(failed, "scrapefleet.run"), one(failed, "scrapefleet.attempt")
    assert one(failed, "scrapefleet.browser.artifacts").parent_id == failed_run.span_id
    # The slot's session, kept from the job before it (capacity 1: one after the other).
    assert one(failed, "scrapefleet.browser.lease").attributes["scrapefleet.session"] == "reused"
    assert failed_attempt.error and failed_attempt.attributes["scrapefleet.outcome"] == "failed"
    assert failed_attempt.attributes["scrapefleet.error_class"] == "permanent"

    # No cookie, no query, in anything exported.
    assert COOKIE_SECRET.encode() not in raw and QUERY_SECRET.encode() not in raw


def _ended(engine: Engine, ids: list[int]) -> bool:
    with engine.connect() as conn:
        done = conn.execute(
            sa.text(
                "SELECT count(*) FROM jobs WHERE id = ANY(:ids)"
                " AND status IN ('completed', 'failed')"
            ),
            {"ids": ids},
        ).scalar()
    return done == len(ids)
