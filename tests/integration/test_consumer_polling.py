"""A consumer with no LISTEN connection (consumer_wakeup = poll) refills a freed slot soon after
its job ends, not at its next plain poll: real producer and consumer processes, one slot,
jobs one after another."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from tests.e2e.test_local_fleet import FAST, completions_per_job, scalar, stopped_after
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HOST = "poll-h1"
JOBS = 6
POLL_S = 6.0  # the plain poll: each job would wait about this long for the next claim


def test_a_polling_consumer_claims_the_refill_of_a_freed_slot_at_once(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name=HOST, capacity=1))
        ids = store.insert_jobs(
            conn, [NewJob("noop", {"sleep_s": 0.05}) for _ in range(JOBS)], default_max_attempts=3
        ).ids
    env = {**FAST, "SCRAPEFLEET_CONSUMER_POLL_S": str(POLL_S)}
    fleet = LocalFleet(database_url, tmp_path / "state", [HOST], env=env)
    with stopped_after(fleet):
        fleet.start_consumer(HOST, {"SCRAPEFLEET_CONSUMER_WAKEUP": "poll"})
        fleet.start_producer()
        # The first job may wait for a plain poll (the producer had not assigned it when the
        # consumer first looked); each of the others follows its predecessor.
        done = "SELECT count(*) FROM jobs WHERE status = 'completed'"
        wait_for(lambda: scalar(engine, done) == JOBS, 2 * POLL_S + 15, f"{JOBS} jobs done")
    assert completions_per_job(engine) == dict.fromkeys(ids, 1)
    with engine.connect() as conn:
        spans = conn.execute(
            sa.text(
                "SELECT started_at, finished_at FROM jobs WHERE id = ANY(:ids) ORDER BY started_at"
            ),
            {"ids": ids},
        ).all()
    gaps = [
        (later.started_at - earlier.finished_at).total_seconds()
        for earlier, later in itertools.pairwise(spans)
    ]
    print(f"\nseconds from one job's end to the next one's start: {gaps}")
    # On the plain poll alone each gap would be about POLL_S (the next claim comes POLL_S
    # after the one that took the job); the refill claims within a fraction of a second.
    assert statistics.median(gaps) < POLL_S / 4, gaps
