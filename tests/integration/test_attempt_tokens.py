"""Attempts that can never be confused: a job timed out and claimed again on the same host.

A real consumer (in a thread) against real PostgreSQL; the test stands in for the producer
(it assigns the due pending job again). The action counts how many of its runs overlap and
which run completed the job.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.actions import register
from scrapefleet.common.store import NewJob
from tests.integration.test_consumer import (
    assign_due_pending,
    consumer_thread,
    job_row,
    make_settings,
    queue_jobs,
    transitions,
    wait_started,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class _Runs:
    """What the action saw: its runs in order, how many ran at once at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.running = 0
        self.most_at_once = 0
        self.second_started = threading.Event()
        self.first_returned = threading.Event()


RUNS = _Runs()


@register("test_outlives_its_timeout")
def _outlives_its_timeout(params: Any) -> dict[str, Any]:
    """The first run outlives the job's timeout: it returns once a second run has started or
    after a few seconds, whichever comes first. Later runs return well within the timeout, but
    only after the first run has returned (so that a second run, if any, spans that return)."""
    with RUNS.lock:
        RUNS.started += 1
        run = RUNS.started
        RUNS.running += 1
        RUNS.most_at_once = max(RUNS.most_at_once, RUNS.running)
    try:
        if run == 1:
            RUNS.second_started.wait(scaled(3))
            return {"run": run}
        RUNS.second_started.set()
        RUNS.first_returned.wait(scaled(3))
        time.sleep(0.5)  # the first run's return is handled meanwhile
        return {"run": run}
    finally:
        with RUNS.lock:
            RUNS.running -= 1
        if run == 1:
            RUNS.first_returned.set()


def test_a_timed_out_attempt_never_disturbs_the_next_one_on_the_same_host(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """Before attempt tokens, the first attempt's thread returned while the second attempt of
    the same job ran on the same host and removed the second's in-flight entry (keyed by job id):
    the second then had no heartbeat and no timeout, and its result was dropped as late."""
    timeout_s = scaled(1.5)
    settings = make_settings(tmp_path, database_url, capacity=2, job_timeout_s=timeout_s)
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        (job,) = queue_jobs(engine, [NewJob("test_outlives_its_timeout", max_attempts=3)])
        wait_for(
            lambda: job_row(engine, job).status == "completed",
            timeout_s=20,
            what="the job completed by its second attempt",
            between=lambda: assign_due_pending(engine),
            poll_s=0.1,
        )
    row = job_row(engine, job)
    assert row.result == {"run": 2}, "completed with the result of the attempt that owned it"
    assert row.attempts == 2 and row.claims == 2
    # Two attempts of one job never ran side by side on one host.
    assert RUNS.most_at_once == 1
    completions = [t for t in transitions(engine, job) if t[1] == "completed"]
    assert completions == [("processing", "completed")]
    with engine.connect() as conn:  # the timed-out attempt's end was confirmed: no lock held
        lingering = conn.execute(
            sa.text("SELECT lingering_host FROM jobs WHERE id = :id"), {"id": job}
        ).scalar_one()
    assert lingering is None
