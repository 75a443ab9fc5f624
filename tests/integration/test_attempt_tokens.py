"""Attempts that can never be confused, and lock keys that hold when a host is frozen.

- A job timed out and claimed again on the same host: a real consumer (in a thread) against
  real PostgreSQL, the test standing in for the producer (it assigns the due job again); the
  action counts how many of its runs overlap and which run completed the job.
- A host frozen (SIGSTOP) long enough for its running job to be rescued, then continued: a real
  ``scrapefleet-consumer`` and ``scrapefleet-producer``, two ``http_get`` jobs sharing a lock key
  against a loopback site that logs its own requests (tests.integration.request_log_site).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import register
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import NewJob
from tests.integration.producer_helpers import PRODUCER_BIN
from tests.integration.request_log_site import request_log_site
from tests.integration.test_consumer import (
    CONSUMER_BIN,
    HOST,
    assign_due_pending,
    consumer_env,
    consumer_process,
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
    """A timed-out attempt's thread that returns while the next attempt of the same job runs
    on the same host must touch nothing of the next one: keyed by job id alone, it would remove
    the next attempt's in-flight entry (no heartbeat, no timeout) and the next result would be
    dropped as late."""
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


# ---------------------------------------------------------------- a frozen host, a lock key


@contextmanager
def producer_process(settings: Settings, log_path: Path, **overrides: str) -> Iterator[None]:
    """``scrapefleet-producer`` on the consumer's state directory (its local probe reads the
    consumer's status document); SIGKILLed at the end, its output shown on failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    env |= {
        "SCRAPEFLEET_DATABASE_URL": str(settings.database_url),
        "SCRAPEFLEET_STATE_DIR": str(settings.state_dir),
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.2",
        **{f"SCRAPEFLEET_{k.upper()}": v for k, v in overrides.items()},
    }
    with log_path.open("ab") as out:
        process = subprocess.Popen([str(PRODUCER_BIN)], env=env, stdout=out, stderr=out)
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def _db_now(engine: Engine) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one()


def _cycled_since(engine: Engine, since: Any) -> bool:
    """The producer finished a cycle that began after ``since`` (database time)."""
    with engine.connect() as conn:
        last = conn.execute(sa.text("SELECT max(last_cycle_at) FROM producers")).scalar()
    return last is not None and last > since


def _submit(engine: Engine, url: str, lock_key: str) -> int:
    payload = {"url": url, "timeout_s": scaled(60)}
    with engine.begin() as conn:
        (job,) = store.insert_jobs(
            conn, [NewJob("http_get", payload, lock_key=lock_key)], default_max_attempts=3
        ).ids
    return job


def test_a_host_frozen_across_the_rescue_never_runs_a_lock_key_twice(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """J1 (a long page) and J2 (a short one) share a lock key; the host running J1 is frozen
    until J1 is rescued, then continued. Without an attempt identity of its own, the frozen
    attempt's thread would run on, the host would claim J1 again as the same attempt, the old
    thread's result would complete J1, and J2 would run while J1's second request still did:
    the site would see the key's jobs overlap."""
    settings = make_settings(tmp_path, database_url, capacity=2, heartbeat_s=0.3)
    long_s = scaled(6)
    with (
        request_log_site() as (site, log),
        consumer_process(settings, tmp_path) as consumer,
        producer_process(
            settings,
            tmp_path / "producer.log",
            rescue_after_s=str(scaled(2)),
            lock_linger_s=str(scaled(60)),
        ),
    ):
        wait_started(engine, settings)
        j1 = _submit(engine, f"{site}/stream?job=J1&seconds={long_s}", "K")
        wait_for(lambda: log.of("J1"), 30, "J1's request reached the site")
        j2 = _submit(engine, f"{site}/stream?job=J2&seconds=0.3", "K")
        os.kill(consumer.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: job_row(engine, j1).releases >= 1, timeout_s=15, what="J1 rescued")
            rescued_at = _db_now(engine)
            # A few cycles for the producer to do what it would with the key meanwhile.
            wait_for(lambda: _cycled_since(engine, rescued_at), what="a producer cycle")
            assert log.of("J1")[0].how == "running", "the frozen attempt's request still runs"
        finally:
            os.kill(consumer.pid, signal.SIGCONT)
        wait_for(
            lambda: {job_row(engine, j).status for j in (j1, j2)} == {"completed"},
            timeout_s=40,
            what="J1 and J2 completed",
            poll_s=0.1,
        )
    # The site's own log: the key's requests never overlapped, J1's own included.
    assert log.overlaps() == [], [(a.job, a.serial, b.job, b.serial) for a, b in log.overlaps()]
    # J1 completed once, with the result of the attempt that owned it: its last request's.
    first, *later = log.of("J1")
    assert later and later[-1].how == "answered"
    assert job_row(engine, j1).result["title"] == f"request {later[-1].serial}"
    assert [t for t in transitions(engine, j1) if t[1] == "completed"] == [
        ("processing", "completed")
    ]
    assert first.how == "closed by the client", "the given-up attempt was ended on its host"


@contextmanager
def consumer_with_lease(settings: Settings, log_path: Path, rescue_after_s: float) -> Iterator[int]:
    """``scrapefleet-consumer run`` whose lease follows ``rescue_after_s``; yields its pid."""
    env = consumer_env(settings) | {"SCRAPEFLEET_RESCUE_AFTER_S": str(rescue_after_s)}
    with log_path.open("ab") as out:
        process = subprocess.Popen(
            [CONSUMER_BIN, "run", "--host", HOST, "--register"], env=env, stdout=out, stderr=out
        )
    try:
        yield process.pid
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_a_consumer_whose_lease_lapsed_ends_and_hands_back_its_attempts(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """No producer here, so nobody rescues: a consumer that could not heartbeat for most of
    rescue_after_s (frozen, here) ends its attempt itself when it runs again, before any
    producer would hand it on, and gives it back (pending, the attempt returned, the same
    claim). Its request is closed on the site; the lock key is free once the thread returned."""
    settings = make_settings(tmp_path, database_url, capacity=2, heartbeat_s=0.3)
    rescue_after_s = scaled(2)
    log_path = tmp_path / "consumer.log"
    with (
        request_log_site() as (site, log),
        consumer_with_lease(settings, log_path, rescue_after_s) as pid,
    ):
        wait_started(engine, settings)
        j1 = _submit(engine, f"{site}/stream?job=J1&seconds={scaled(20)}", "K")
        with engine.begin() as conn:
            store.assign_jobs(conn, [(j1, HOST)])
        wait_for(lambda: log.of("J1"), 30, "J1's request reached the site")
        os.kill(pid, signal.SIGSTOP)
        try:
            time_frozen = time.monotonic()
            wait_for(
                lambda: time.monotonic() - time_frozen > rescue_after_s,
                timeout_s=rescue_after_s + 5,
                what="frozen past the lease",
                poll_s=0.1,
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: job_row(engine, j1).status == "pending", what="J1 handed back")
        wait_for(lambda: log.of("J1")[0].ended is not None, what="J1's request ended")
        wait_for(lambda: job_row(engine, j1).lingering_host is None, what="the end confirmed")
    row = job_row(engine, j1)
    assert (row.attempts, row.claims, row.releases) == (0, 1, 1)
    with engine.connect() as conn:
        message = conn.execute(
            sa.text("SELECT message FROM job_events WHERE job_id = :id ORDER BY id DESC LIMIT 1"),
            {"id": j1},
        ).scalar_one()
    assert "lost the database" in message
    assert log.of("J1")[0].how == "closed by the client"
    assert "no heartbeat reached the database" in log_path.read_text()


def test_a_job_whose_consumer_is_killed_six_times_completes_with_one_attempt(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """SIGKILL of the consumer mid-job, six times: each restart gives the attempt back (a
    release its host caused, never bounded), and the seventh run completes the job with
    ``attempts`` = 1. Before, the sixth release failed it ("released 6 times")."""
    settings = make_settings(tmp_path, database_url, capacity=2)
    (job,) = queue_jobs(engine, [NewJob("noop", {"sleep_s": scaled(2)}, max_attempts=1)])
    for kill in range(6):
        with consumer_process(settings, tmp_path) as consumer:
            claimed = ("processing", kill + 1)  # by this process: the last one's is there
            wait_for(
                lambda claimed=claimed: _status_and_claims(engine, job) == claimed,
                what=f"run {kill + 1} started",
                between=lambda: assign_due_pending(engine),
            )
            os.kill(consumer.pid, signal.SIGKILL)
            consumer.wait(scaled(5))
    with consumer_process(settings, tmp_path):
        wait_for(
            lambda: job_row(engine, job).status == "completed",
            timeout_s=20,
            what="the seventh run completed the job",
            between=lambda: assign_due_pending(engine),
            poll_s=0.1,
        )
    row = job_row(engine, job)
    assert (row.attempts, row.releases, row.page_releases, row.claims) == (1, 6, 0, 7)


def _status_and_claims(engine: Engine, job: int) -> tuple[str, int]:
    row = job_row(engine, job)
    return row.status, row.claims
