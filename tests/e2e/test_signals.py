"""Both daemons as real processes, stopped by signals: the first SIGTERM drains and exits 0;
a second one stops cold, promptly, and the job it did not wait for is neither lost nor
completed twice."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.settings import Settings
from scrapefleet.common.status.document import read_status
from scrapefleet.common.store import NewJob
from tests.integration.producer_helpers import (
    kill_processes,
    leader_application,
    leader_pid,
    start_producer_process,
)
from tests.integration.test_consumer import (
    HOST,
    all_in,
    assign_due_pending,
    consumer_process,
    host_row,
    job_row,
    make_settings,
    queue_jobs,
    transitions,
    wait_started,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def _daemon_state(settings: Settings) -> str | None:
    return read_status(settings.state_dir, HOST).daemon


def test_consumer_sigterm_drains_and_exits_0(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url)
    with consumer_process(settings, tmp_path, "--capacity", "2") as proc:
        wait_started(engine, settings)
        busy = queue_jobs(engine, [NewJob("noop", {"sleep_s": 1.0}) for _ in range(2)])
        wait_for(lambda: all_in(engine, busy, "processing"), what="2 jobs processing")
        waiting = queue_jobs(engine, [NewJob("noop") for _ in range(3)])
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: all_in(engine, waiting, "pending"), what="queued jobs handed back")
        assert proc.wait(scaled(15)) == 0
    assert all_in(engine, busy, "completed")  # warm: the jobs in hand finished
    assert all(job_row(engine, i).host is None for i in waiting)
    host = host_row(engine)
    assert host.state == "offline" and "SIGTERM" in host.state_reason
    status = read_status(settings.state_dir, HOST)
    assert status.state == "offline" and status.daemon == "stopped"


def test_consumer_second_sigterm_stops_cold_and_the_job_comes_back_once(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url)
    log = tmp_path / "cold.log"
    with consumer_process(settings, tmp_path, "--capacity", "1", log_path=log) as proc:
        wait_started(engine, settings)
        (slow,) = queue_jobs(engine, [NewJob("noop", {"sleep_s": 8.0}, max_attempts=3)])
        wait_for(lambda: all_in(engine, [slow], "processing"), what="the slow job running")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: _daemon_state(settings) == "draining", what="the warm drain")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(scaled(10)) == 0
        # A warm drain would have waited for the job to complete: it did not.
        row = job_row(engine, slow)
        assert row.status == "pending" and row.attempts == 0, (row.status, row.attempts)
        assert row.last_error.startswith("interrupted")
        assert "cold stop" in log.read_text()
        assert host_row(engine).state == "offline" and _daemon_state(settings) == "stopped"

    with consumer_process(settings, tmp_path, "--capacity", "1"):
        wait_for(
            lambda: all_in(engine, [slow], "completed"),
            timeout_s=30,
            what="the job completed after the restart",
            between=lambda: assign_due_pending(engine),
        )
    steps = transitions(engine, slow)
    assert steps.count(("processing", "completed")) == 1, steps
    assert steps.count(("processing", "pending")) == 1, steps
    assert (job_row(engine, slow).attempts, job_row(engine, slow).releases) == (1, 1)


def test_producer_sigterm_exits_0_and_releases_the_lock(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    process = start_producer_process(database_url, tmp_path, tmp_path / "producer.log")
    try:
        wait_for(lambda: leader_pid(engine) == process.pid, 15, "the producer to lead")
        process.send_signal(signal.SIGTERM)
        assert process.wait(scaled(10)) == 0
        assert leader_application(engine) is None
    finally:
        kill_processes([process])
