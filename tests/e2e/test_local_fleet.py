"""A producer and consumer hosts as real subprocesses: nothing lost, nothing run twice, when a
consumer is killed with SIGKILL mid-job or the active producer dies."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FAST = {
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    "SCRAPEFLEET_HEARTBEAT_S": "0.5",
    "SCRAPEFLEET_RESCUE_AFTER_S": "3",
    "SCRAPEFLEET_PROBE_FAILURES_OFFLINE": "2",
    "SCRAPEFLEET_OFFLINE_GRACE_S": "1",
    "SCRAPEFLEET_LOCAL_STATE_STALE_S": "2",
    "SCRAPEFLEET_BACKOFF_BASE_S": "0.1",
}


def scalar(engine: Engine, sql: str, **params: object) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def completions_per_job(engine: Engine) -> dict[int, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT j.id, count(e.id) FROM jobs j LEFT JOIN job_events e"
                " ON e.job_id = j.id AND e.to_status = 'completed' GROUP BY j.id"
            )
        ).all()
    return dict(rows)


@contextlib.contextmanager
def stopped_after(fleet: LocalFleet) -> Iterator[LocalFleet]:
    """Stops ``fleet`` on the way out, then holds that every process exited 0; a failed
    assertion inside carries the tail of each process's log."""
    try:
        try:
            yield fleet
        except AssertionError as exc:
            logs = "\n".join(fleet.log_tail(name) for name in fleet.processes)
            raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        codes = fleet.stop()
    assert all(code == 0 for code in codes.values()), codes


@pytest.fixture
def fleet_factory(database_url: str, tmp_path: Path) -> Iterator[Callable[..., LocalFleet]]:
    fleets: list[LocalFleet] = []

    def make(hosts: list[str], producers: int = 1) -> LocalFleet:
        fleet = LocalFleet(database_url, tmp_path / "state", hosts, env=FAST, producers=producers)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop()


def _submit(engine: Engine, count: int, sleep_s: float) -> list[int]:
    with engine.begin() as conn:
        jobs = [NewJob("noop", {"sleep_s": sleep_s}, max_attempts=5) for _ in range(count)]
        return store.insert_jobs(conn, jobs, default_max_attempts=5).ids


def _add_hosts(engine: Engine, names: list[str], capacity: int) -> None:
    with engine.begin() as conn:
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=capacity))


def test_consumer_killed_mid_job_loses_nothing_and_runs_nothing_twice(
    engine: Engine, fleet_factory: Callable[..., LocalFleet]
) -> None:
    _add_hosts(engine, ["h1", "h2"], capacity=3)
    ids = _submit(engine, 40, sleep_s=0.3)
    fleet = fleet_factory(["h1", "h2"]).start()
    busy = "SELECT count(*) FROM jobs WHERE host = 'h1' AND status = 'processing'"
    wait_for(lambda: scalar(engine, busy) > 0, 30, "h1 to run jobs")

    fleet.signal("consumer-h1", signal.SIGKILL)  # mid-job: its jobs stay 'processing'
    with engine.connect() as conn:
        orphans = (
            conn.execute(sa.text("SELECT id FROM jobs WHERE host = 'h1' AND status = 'processing'"))
            .scalars()
            .all()
        )
    assert orphans
    # Let the other host take over some work before h1 comes back (as after a reboot).
    done = "SELECT count(*) FROM jobs WHERE status = 'completed'"
    before = scalar(engine, done)
    wait_for(lambda: scalar(engine, done) > before + 3, 30, "h2 to go on completing jobs")
    fleet.start_consumer("h1")

    finished = "SELECT count(*) FROM jobs WHERE status IN ('completed', 'failed')"
    wait_for(lambda: scalar(engine, finished) == len(ids), 60, "every job to finish")
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'failed'") == 0
    assert set(completions_per_job(engine).values()) == {1}, "a job completed twice or never"
    # Each orphan went back to pending once, either through the restarted consumer's own
    # recovery or the producer's heartbeat rescue, whichever came first on this machine.
    with engine.connect() as conn:
        recovered = conn.execute(
            sa.text(
                "SELECT job_id, message FROM job_events WHERE job_id = ANY(:ids)"
                " AND from_status = 'processing' AND to_status = 'pending'"
            ),
            {"ids": list(orphans)},
        ).all()
    assert sorted(r.job_id for r in recovered) == sorted(orphans)
    assert all(r.message.startswith(("interrupted", "rescued")) for r in recovered), recovered


def _leader_pid(engine: Engine) -> int | None:
    """The OS pid of the producer holding the advisory lock, from its application_name."""
    with engine.connect() as conn:
        name = conn.execute(
            sa.text(
                "SELECT a.application_name FROM pg_locks l"
                " JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
                " AND a.application_name LIKE 'scrapefleet-producer-%'"
            )
        ).scalar()
    return int(name.rsplit("-", 1)[1]) if name else None


def test_standby_producer_takes_over_when_the_active_one_dies(
    engine: Engine, fleet_factory: Callable[..., LocalFleet]
) -> None:
    _add_hosts(engine, ["h1", "h2"], capacity=3)
    first = _submit(engine, 30, sleep_s=0.05)
    fleet = fleet_factory(["h1", "h2"], producers=2).start()
    wait_for(lambda: _leader_pid(engine) is not None, 20, "a producer to take the lock")
    leader = _leader_pid(engine)
    name = next(n for n, p in fleet.processes.items() if p.pid == leader)
    fleet.signal(name, signal.SIGKILL)

    wait_for(lambda: _leader_pid(engine) not in (None, leader), 10, "the standby to take over")
    second = _submit(engine, 30, sleep_s=0.05)
    finished = "SELECT count(*) FROM jobs WHERE status = 'completed'"
    wait_for(lambda: scalar(engine, finished) == len(first) + len(second), 60, "all jobs done")
    assert set(completions_per_job(engine).values()) == {1}


def test_a_job_whose_host_dies_three_times_still_completes_on_its_first_attempt(
    engine: Engine, fleet_factory: Callable[..., LocalFleet]
) -> None:
    """Host crashes are releases, not the job's failures: a job on a host SIGKILLed three times
    mid-attempt, with max_attempts 3, completes with attempts = 1 and releases = 3."""
    _add_hosts(engine, ["h1"], capacity=1)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob("noop", {"sleep_s": 2.0}, max_attempts=3)], default_max_attempts=3
        ).ids
    fleet = fleet_factory(["h1"]).start()
    running = f"SELECT count(*) FROM jobs WHERE id = {job_id} AND status = 'processing'"
    releases = f"SELECT releases FROM jobs WHERE id = {job_id}"
    for kill in range(3):
        wait_for(lambda: scalar(engine, running) == 1, 30, f"the job running (kill {kill + 1})")
        fleet.signal("consumer-h1", signal.SIGKILL)
        fleet.start_consumer("h1")  # its recovery releases the interrupted attempt
        wait_for(lambda n=kill: scalar(engine, releases) == n + 1, 30, "the release recorded")
    done = f"SELECT count(*) FROM jobs WHERE id = {job_id} AND status = 'completed'"
    wait_for(lambda: scalar(engine, done) == 1, 60, "the job completed")
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT attempts, releases FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()
    assert (row.attempts, row.releases) == (1, 3)
    assert completions_per_job(engine) == {job_id: 1}
