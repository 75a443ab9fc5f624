"""A hostile regular expression in a real consumer: the crawl page's attempt fails as
``permanent`` within the pattern's time bound, naming the field, and the consumer's heartbeats
keep their interval while the pattern runs (the regex engine releases the GIL)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.constants import REGEX_TIMEOUT_S
from scrapefleet.common.store import NewJob
from tests.integration.page_server import serve_pages
from tests.integration.test_consumer import (
    consumer_thread,
    make_settings,
    queue_jobs,
    wait_started,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HEARTBEAT_S = 0.2


def test_a_hostile_pattern_fails_its_attempt_and_the_heartbeats_go_on(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2, heartbeat_s=HEARTBEAT_S)
    read = sa.text("SELECT status, heartbeat_at, error_class, last_error FROM jobs WHERE id = :id")
    with serve_pages() as site, consumer_thread(settings, database_url):
        site.page("/", "<title>T</title><p>" + "x" * 60 + "</p>")
        wait_started(engine, settings)
        fields = {"bad": {"css": "p", "re": "(x|xx)+y"}}  # exponential backtracking
        (job_id,) = queue_jobs(engine, [NewJob("crawl", {"url": site.url("/"), "fields": fields})])
        beats: list[float] = []  # when a new heartbeat_at was seen while the job ran
        last = None
        started = time.monotonic()

        def failed() -> bool:
            nonlocal last
            with engine.connect() as conn:
                row = conn.execute(read, {"id": job_id}).one()
            if row.status == "processing" and row.heartbeat_at != last:
                last = row.heartbeat_at
                beats.append(time.monotonic())
            return bool(row.status == "failed")

        wait_for(failed, scaled(REGEX_TIMEOUT_S + 10), "the hostile page's attempt to fail")
        took = time.monotonic() - started
    with engine.connect() as conn:
        row = conn.execute(read, {"id": job_id}).one()
    assert row.error_class == "permanent"
    assert "PatternTimeout: field 'bad': the pattern '(x|xx)+y' ran past 1 s" in row.last_error
    assert took < scaled(REGEX_TIMEOUT_S + 5)
    # The job's heartbeat went on while its thread ran the pattern (about a second).
    assert len(beats) >= 3, beats
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    print(f"heartbeat gaps while the pattern ran: {[round(g, 2) for g in gaps]}")
    # Not scaled: a GIL held for the pattern's whole second would show as one gap that long.
    assert max(gaps) < 0.8 * REGEX_TIMEOUT_S, gaps
