"""The producer against real PostgreSQL: cycles, health, rescue, leadership, wake-ups.

Status files written with common.status.document.write_status stand in for live consumers; the
producer's real local probe reads them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.runtime.lifecycle import DaemonState
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store import NewJob
from scrapefleet.producer.probes.local_probe import HostTarget
from scrapefleet.producer.probes.routing_probe import RoutingProbe
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import (
    GIB,
    PRODUCER_BIN,
    add_hosts,
    count_status,
    host_state,
    in_flight_per_host,
    kill_processes,
    leader_application,
    leader_pid,
    producer_settings,
    publish_status,
    start_producer_process,
    statuses,
    submit,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


# ---------------------------------------------------------------- one cycle


def test_cycle_assigns_within_caps_by_priority_and_not_before(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"h1": 2, "h2": 3})
    publish_status(tmp_path, "h1")
    publish_status(tmp_path, "h2")
    later = submit(engine, [NewJob("noop", priority=9, not_before=utcnow() + timedelta(hours=1))])
    low = submit(engine, [NewJob("noop", priority=0) for _ in range(4)])
    high = submit(engine, [NewJob("noop", priority=5) for _ in range(3)])

    report = make_producer().run_cycle()

    assert report.leader and report.error is None and report.assigned == 5
    jobs = statuses(engine)
    queued = {job for job, (status, _) in jobs.items() if status == "queued"}
    assert queued == set(high) | set(low[:2])  # priority first, then age
    assert jobs[later[0]][0] == "pending"  # not before its time
    assert in_flight_per_host(engine) == {"h1": 2, "h2": 3}


def test_running_count_from_the_probe_reduces_free_slots(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1", running=4)  # e.g. jobs the database no longer gives it
    submit(engine, [NewJob("noop") for _ in range(10)])
    assert make_producer().run_cycle().assigned == 2


def test_doubtful_hosts_get_no_work(engine: Engine, tmp_path: Path, make_producer: Any) -> None:
    add_hosts(engine, {"stale": 6, "restarting": 6, "low-memory": 6, "drained": 6, "ok": 2})
    publish_status(tmp_path, "stale", age_s=600)
    publish_status(tmp_path, "restarting", state="restarting")
    publish_status(tmp_path, "low-memory", available_bytes=GIB // 2)
    publish_status(tmp_path, "drained")
    publish_status(tmp_path, "ok")
    with engine.begin() as conn:
        store.drain_host(conn, "drained")
    submit(engine, [NewJob("noop") for _ in range(10)])

    make_producer().run_cycle()

    assert in_flight_per_host(engine) == {"ok": 2}


def test_lock_keys_never_overlap(engine: Engine, tmp_path: Path, make_producer: Any) -> None:
    add_hosts(engine, {"h1": 6, "h2": 6})
    publish_status(tmp_path, "h1")
    publish_status(tmp_path, "h2")
    ids = submit(engine, [NewJob("noop", lock_key=f"acct-{i % 3}") for i in range(9)])
    submit(engine, [NewJob("noop") for _ in range(3)])
    producer = make_producer()

    assert producer.run_cycle().assigned == 3 + 3  # one per key, plus the keyless ones
    assert producer.run_cycle().assigned == 0  # keys still busy
    with engine.begin() as conn:
        for host in ("h1", "h2"):
            for job in store.claim_jobs(conn, host, 6).jobs:
                if job.lock_key == "acct-0":
                    store.complete_job(conn, host, job.id, job.attempt, {})
    assert producer.run_cycle().assigned == 1  # the next acct-0 job, and only it
    jobs = statuses(engine)
    assert jobs[ids[3]][0] == "queued" and jobs[ids[6]][0] == "pending"


# ---------------------------------------------------------------- health


def test_three_failed_probes_make_a_host_offline_and_success_brings_it_back(
    engine: Engine, tmp_path: Path, make_producer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    add_hosts(engine, {"h1": 6})
    # No status file: probes fail, and count from the first (no start-up grace).
    producer = make_producer(probe_failures_offline=3, probe_start_grace_s=0)

    assert producer.run_cycle().transitions == ()
    assert producer.run_cycle().transitions == ()
    assert host_state(engine, "h1") == "active"
    with caplog.at_level(logging.INFO, logger="scrapefleet.producer"):
        assert producer.run_cycle().transitions == (("h1", "active", "offline"),)
    assert host_state(engine, "h1") == "offline"
    [lost] = [r for r in caplog.records if "active -> offline" in r.getMessage()]
    assert lost.levelno == logging.WARNING and lost.sf_host == "h1"  # type: ignore[attr-defined]

    publish_status(tmp_path, "h1")
    submit(engine, [NewJob("noop")])
    report = producer.run_cycle()
    assert report.transitions == (("h1", "offline", "active"),)
    assert report.assigned == 1  # back in the same cycle
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT probe_failures, last_seen_at FROM hosts")).one()
    assert row.probe_failures == 0 and row.last_seen_at is not None


def test_a_fresh_producer_counts_no_failure_of_a_host_that_has_not_answered_it_yet(
    engine: Engine, tmp_path: Path, make_producer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Started beside its consumers, the producer probes them before their first status
    document: within its start-up grace those failures are not recorded. A host that never
    answers goes offline once the grace is over."""
    add_hosts(engine, {"h1": 6, "h2": 6})
    producer = make_producer(probe_failures_offline=1, probe_start_grace_s=30)
    clock = [1000.0]
    producer._monotonic = lambda: clock[0]
    with caplog.at_level(logging.DEBUG, logger="scrapefleet.producer"):
        for _ in range(3):  # neither consumer has written its document yet
            assert producer.run_cycle().transitions == ()
            clock[0] += 2
        publish_status(tmp_path, "h1")  # h1's consumer is up
        submit(engine, [NewJob("noop")])
        assert producer.run_cycle().assigned == 1
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "probe" in r.message]
    with engine.connect() as conn:
        events = conn.execute(sa.text("SELECT event, to_state FROM host_events")).all()
        failures = conn.execute(sa.text("SELECT sum(probe_failures) FROM hosts")).scalar()
    assert not [e for e in events if e.event.startswith("probe") or e.to_state == "offline"]
    assert failures == 0
    assert host_state(engine, "h1") == "active" and host_state(engine, "h2") == "active"

    clock[0] += 30  # the grace is over: h2, which never answered, is counted
    assert producer.run_cycle().transitions == (("h2", "active", "offline"),)


# ---------------------------------------------------------------- rescue


def test_stale_processing_jobs_are_rescued_and_live_ones_kept(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"h1": 6})
    stale, live, last_attempt = submit(
        engine, [NewJob("noop"), NewJob("noop"), NewJob("noop", max_attempts=1)]
    )
    with engine.begin() as conn:
        store.assign_jobs(conn, [(stale, "h1"), (live, "h1"), (last_attempt, "h1")])
        store.claim_jobs(conn, "h1", 6)
        conn.execute(
            sa.text(
                "UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = ANY(:ids)"
            ),
            {"ids": [stale, last_attempt]},
        )
    # No status file: the host gets nothing new, so the rescued job stays visible as pending.
    report = make_producer(rescue_after_s=30).run_cycle()

    assert report.rescued == 2
    jobs = statuses(engine)
    assert jobs[stale] == ("pending", None)
    assert jobs[live] == ("processing", "h1")
    # A rescue is a release: even a job on its last attempt runs again.
    assert jobs[last_attempt] == ("pending", None)


def test_queued_jobs_of_a_host_offline_past_grace_return_to_pending(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"gone": 6, "recent": 6})
    ids = submit(engine, [NewJob("noop"), NewJob("noop")])
    with engine.begin() as conn:
        store.assign_jobs(conn, [(ids[0], "gone"), (ids[1], "recent")])
        for name in ("gone", "recent"):
            store.set_host_state(conn, name, "offline", "test")
        conn.execute(
            sa.text(
                "UPDATE hosts SET state_changed_at = now() - interval '10 minutes'"
                " WHERE name = 'gone'"
            )
        )
    report = make_producer(offline_grace_s=60).run_cycle()

    assert report.requeued == 1
    assert statuses(engine) == {ids[0]: ("pending", None), ids[1]: ("queued", "recent")}


# ---------------------------------------------------------------- the cap, as a property

operation = st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 12), st.booleans()),
    st.tuples(st.just("cycle"), st.booleans()),
    st.tuples(st.just("claim"), st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.just("complete"), st.integers(0, 2), st.integers(1, 6)),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    capacities=st.lists(st.integers(1, 6), min_size=3, max_size=3),
    operations=st.lists(operation, min_size=5, max_size=25),
)
def test_cap_and_lock_keys_hold_under_interleaved_cycles_claims_and_completions(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    capacities: list[int],
    operations: list[tuple[Any, ...]],
) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, hosts, job_events, host_events RESTART IDENTITY"))
    names = ["h0", "h1", "h2"]
    cap = dict(zip(names, capacities, strict=True))
    add_hosts(engine, cap)
    producer = Producer(producer_settings(database_url, tmp_path), engine)
    try:
        for op in operations:
            if op[0] == "submit":
                keyed = op[2]
                submit(
                    engine,
                    [NewJob("noop", lock_key=f"k{i % 4}" if keyed else None) for i in range(op[1])],
                )
            elif op[0] == "cycle":
                _publish_processing_counts(engine, tmp_path, names)
                report = producer.run_cycle(full=op[1])
                assert report.error is None
            elif op[0] == "claim":
                with engine.begin() as conn:
                    store.claim_jobs(conn, names[op[1]], op[2])
            else:
                _complete_some(engine, names[op[1]], op[2])
            for host, n in in_flight_per_host(engine).items():
                assert n <= cap[host], f"{host} has {n} jobs in flight, cap {cap[host]}"
            with engine.connect() as conn:
                keys = (
                    conn.execute(
                        sa.text(
                            "SELECT lock_key FROM jobs WHERE lock_key IS NOT NULL"
                            " AND status IN ('queued', 'processing')"
                        )
                    )
                    .scalars()
                    .all()
                )
            assert len(keys) == len(set(keys))
    finally:
        producer.close()


def _publish_processing_counts(engine: Engine, state_dir: Path, names: Sequence[str]) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT host, count(*) AS n FROM jobs WHERE status = 'processing' GROUP BY host"
            )
        )
        running: dict[str, int] = {r.host: r.n for r in rows}
    for name in names:
        publish_status(state_dir, name, running=running.get(name, 0))


def _complete_some(engine: Engine, host: str, n: int) -> None:
    with engine.begin() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT id, attempts FROM jobs WHERE host = :h AND status = 'processing'"
                " ORDER BY id LIMIT :n"
            ),
            {"h": host, "n": n},
        ).all()
        for row in rows:
            assert store.complete_job(conn, host, row.id, row.attempts, {})


# ---------------------------------------------------------------- the daemon


def test_a_finished_job_is_refilled_at_once_not_at_the_next_tick(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"h1": 1})
    publish_status(tmp_path, "h1")
    first, second = submit(engine, [NewJob("noop"), NewJob("noop")])
    producer = make_producer(producer_interval_s=60)  # only the first tick, at start
    producer.start()
    wait_for(lambda: statuses(engine)[first][0] == "queued", what="the first assignment")
    wait_for(lambda: producer.listening, what="the wake-up listener")
    with engine.begin() as conn:
        (job,) = store.claim_jobs(conn, "h1", 1).jobs
        assert store.complete_job(conn, "h1", job.id, job.attempt, {})  # NOTIFYs
    wait_for(lambda: statuses(engine)[second][0] == "queued", 5, "the refill on NOTIFY")


def test_two_producers_only_one_assigns(engine: Engine, tmp_path: Path, make_producer: Any) -> None:
    add_hosts(engine, {"h1": 6, "h2": 6})
    publish_status(tmp_path, "h1")
    publish_status(tmp_path, "h2")
    first, second = make_producer(), make_producer()
    first.start()
    wait_for(lambda: first.is_leader, what="the first producer to lead")
    second.start()
    submit(engine, [NewJob("noop") for _ in range(12)])
    wait_for(lambda: count_status(engine, "queued") == 12, what="12 jobs queued")
    wait_for(lambda: second.cycles >= 3, what="the standby to try a few times")
    assert first.total_assigned == 12 and second.total_assigned == 0
    assert not second.is_leader


def test_run_until_idle_returns_zero(engine: Engine, make_producer: Any) -> None:
    producer = make_producer()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(producer.run(until_idle=True)))
    thread.start()
    thread.join(10)
    assert result == [0]


class _TerminatingProbe:
    """The real probe, which, once armed, kills the producer's own database session while
    the cycle is between its statements (mid-cycle)."""

    def __init__(self, inner: RoutingProbe, engine: Engine) -> None:
        self.inner = inner
        self.engine = engine
        self.victim: Producer | None = None
        self.armed = threading.Event()
        self.done = threading.Event()

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        if self.armed.is_set() and self.victim is not None:
            self.armed.clear()
            with self.engine.begin() as conn:
                conn.execute(
                    sa.text("SELECT pg_terminate_backend(:pid)"),
                    {"pid": self.victim.leader_backend_pid},
                )
            self.done.set()
        return self.inner.probe_all(targets)

    def close(self) -> None:
        self.inner.close()


def test_a_dropped_connection_mid_cycle_is_survived(
    engine: Engine, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="scrapefleet.producer.producer_daemon")
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1")
    settings_ = producer_settings(database_url, tmp_path)
    probe = _TerminatingProbe(RoutingProbe(settings_), engine)
    producer = Producer(settings_, engine, probe)
    probe.victim = producer
    producer.start()
    try:
        wait_for(lambda: producer.is_leader, what="the producer to lead")
        old_pid = producer.leader_backend_pid
        probe.armed.set()
        wait_for(probe.done.is_set, what="the producer's session to be terminated")
        submit(engine, [NewJob("noop") for _ in range(3)])
        wait_for(lambda: count_status(engine, "queued") == 3, what="assignment after reconnect")
        assert producer.is_leader and producer.leader_backend_pid != old_pid
        assert any("connection lost mid-cycle" in r.getMessage() for r in caplog.records)
    finally:
        producer.stop()


# ---------------------------------------------------------------- stopping


def test_the_lifecycle_runs_from_start_to_stop(make_producer: Any) -> None:
    producer = make_producer()
    assert producer.lifecycle.state is DaemonState.STARTING
    producer.start()
    assert producer.lifecycle.is_running
    producer.stop()
    assert producer.lifecycle.state is DaemonState.STOPPED and not producer.lifecycle.cold
    producer.stop()  # idempotent
    assert producer.run_cycle().error == "stopping"
    never_started = make_producer()
    never_started.stop()
    assert never_started.lifecycle.state is DaemonState.STOPPED


class _HangingProbe:
    """The real probe, which, once armed, hangs in the probe round until released."""

    def __init__(self, inner: RoutingProbe) -> None:
        self.inner = inner
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        if self.armed.is_set():
            self.entered.set()
            self.release.wait(scaled(60))
        return self.inner.probe_all(targets)

    def close(self) -> None:
        self.inner.close()


def test_a_hung_cycle_holds_the_stop_no_longer_than_the_drain_timeout(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1")
    settings_ = producer_settings(database_url, tmp_path)
    probe = _HangingProbe(RoutingProbe(settings_))
    probe.armed.set()
    producer = Producer(settings_, engine, probe, drain_timeout_s=0.5)
    producer.start()
    try:
        wait_for(probe.entered.is_set, what="a cycle hanging in its probe round")
        assert producer.is_leader
        producer.stop()  # would wait for the hung cycle (the test's timeout) if unbounded
        assert producer.lifecycle.state is DaemonState.STOPPED and producer.lifecycle.cold
    finally:
        probe.release.set()
    # The abandoned cycle ends in the background; the wind-down then releases the lock.
    wait_for(lambda: leader_application(engine) is None, what="the lock released at last")


# ---------------------------------------------------------------- real processes


def test_killing_the_active_producer_hands_over_to_the_standby(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1")
    log = tmp_path / "producers.log"
    processes = [start_producer_process(database_url, tmp_path, log) for _ in range(2)]
    try:
        pids = {p.pid: p for p in processes}
        leader = wait_for(lambda: leader_pid(engine), 15, "a leader")
        assert leader in pids
        # Both up: the standby has written its log line (it tried the lock and lost).
        wait_for(lambda: "standing by" in log.read_text(), 15, "the standby")
        submit(engine, [NewJob("noop")])
        wait_for(lambda: count_status(engine, "queued") == 1, what="the leader to assign")

        os.kill(leader, signal.SIGKILL)
        pids[leader].wait(5)
        (standby,) = set(pids) - {leader}
        # Within about one interval (0.2 s) once the server has seen the session go.
        wait_for(lambda: leader_pid(engine) == standby, 3, "the standby to take over")
        submit(engine, [NewJob("noop")])
        wait_for(lambda: count_status(engine, "queued") == 2, what="the new leader to assign")
    finally:
        kill_processes(processes)


def test_invalid_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = os.environ | {
        "SCRAPEFLEET_DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "-1",
    }
    done = subprocess.run([str(PRODUCER_BIN)], env=env, capture_output=True, timeout=scaled(20))
    assert done.returncode == 2
    assert done.stderr.decode().strip().count("\n") == 0
    assert "producer_interval_s" in done.stderr.decode()


def test_unreachable_database_is_one_line_and_exit_1(tmp_path: Path) -> None:
    env = os.environ | {"SCRAPEFLEET_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}
    done = subprocess.run([str(PRODUCER_BIN)], env=env, capture_output=True, timeout=scaled(20))
    assert done.returncode == 1
    err = done.stderr.decode().strip()
    assert err.count("\n") == 0 and "database unavailable" in err


def test_the_pending_read_is_planned_once_not_every_cycle(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    """psycopg prepares a statement on its sixth run; from then on the pending read must reuse
    one generic plan (PostgreSQL's default re-planned it on every cycle, at 0.3-0.5 ms)."""
    add_hosts(engine, {"h1": 1})
    publish_status(tmp_path, "h1")
    producer = make_producer()
    assert producer.run_cycle().leader
    cycles = 12
    for _ in range(cycles):
        submit(engine, [NewJob("noop")])
        assert producer.run_cycle(full=False).error is None
        with engine.begin() as conn:
            store.claim_jobs(conn, "h1", 1)
        _complete_some(engine, "h1", 1)
    with producer._leader.transaction() as conn:
        plans = conn.execute(
            sa.text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE 'SELECT id, priority, kind%'"
            )
        ).all()
        jit = conn.execute(sa.text("SHOW jit")).scalar_one()
    assert len(plans) == 1, plans  # prepared: it ran more than five times on this session
    generic, custom = plans[0]
    assert custom == 0 and generic >= cycles - 5, plans
    assert jit == "off"


def test_a_rescue_names_the_host_its_jobs_were_taken_from(
    engine: Engine, tmp_path: Path, make_producer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """ "Which host is sick?" starts from the log: the rescue line names the host (a field too)."""
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1")
    ids = submit(engine, [NewJob("noop"), NewJob("noop")])
    with engine.begin() as conn:
        store.assign_jobs(conn, [(i, "h1") for i in ids])
        store.claim_jobs(conn, "h1", 2)
        conn.execute(sa.text("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes'"))
    producer = make_producer()
    with caplog.at_level(logging.WARNING, logger="scrapefleet.producer.producer_daemon"):
        assert producer.run_cycle().rescued == 2
    [line] = [r for r in caplog.records if r.getMessage().startswith("rescued jobs")]
    assert "count=2 hosts=h1:2 ids=" in line.getMessage()
    assert line.sf_host == "h1"  # type: ignore[attr-defined]
