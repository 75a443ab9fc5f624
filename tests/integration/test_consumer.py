"""The consumer daemon against real PostgreSQL: in a thread, or as `scrapefleet-consumer`.

The tests stand in for the producer: they queue jobs on a host with store.insert_jobs +
assign_jobs, and where a job goes back to pending (retry, recovery) a small loop assigns the
due ones again. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import register
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.runtime.lifecycle import DaemonState
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.status.document import parse_status, read_status
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.daemon import Consumer
from tests.cli_helpers import scrubbed_env
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

HOST = "c1"
CONSUMER_BIN = str(Path(sys.executable).with_name("scrapefleet-consumer"))
FAST = {
    "consumer_poll_s": 0.2,
    "heartbeat_s": 0.5,
    "backoff_base_s": 0.1,
    "backoff_max_s": 1.0,
}


# ---------------------------------------------------------------- helpers


def make_settings(tmp_path: Path, database_url: str, **overrides: Any) -> Settings:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-1\n")
    values = {
        "database_url": database_url,
        "state_dir": tmp_path / "state",
        "boot_id_file": boot_id,
        **FAST,
        **overrides,
    }
    return load_settings(None, **values)


def queue_jobs(engine: Engine, jobs: list[NewJob], host: str = HOST) -> list[int]:
    """Stand in for the producer: insert and assign to ``host`` (NOTIFYs it)."""
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, host) for i in ids])
    return ids


def assign_due_pending(engine: Engine, host: str = HOST) -> None:
    """The producer's part for retried and recovered jobs: due pending jobs to ``host``."""
    with engine.begin() as conn:
        due = store.lock_pending_jobs(conn, 100)
        store.assign_jobs(conn, [(p.id, host) for p in due])


def statuses(engine: Engine, ids: list[int]) -> dict[int, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, status FROM jobs WHERE id = ANY(:ids)"), {"ids": ids}
        )
        return dict(rows.all())


def all_in(engine: Engine, ids: list[int], status: str) -> bool:
    found = statuses(engine, ids)
    return len(found) == len(ids) and set(found.values()) == {status}


def job_row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()


def transitions(engine: Engine, job_id: int) -> list[tuple[str | None, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT from_status, to_status FROM job_events WHERE job_id = :id ORDER BY id"),
            {"id": job_id},
        )
        return [(r.from_status, r.to_status) for r in rows]


def host_row(engine: Engine, host: str = HOST) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM hosts WHERE name = :n"), {"n": host}).one()


def processing_on(engine: Engine, host: str = HOST) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE host = :h AND status = 'processing'"),
            {"h": host},
        ).scalar_one()


@contextmanager
def consumer_thread(
    settings: Settings,
    database_url: str,
    host: str = HOST,
    until_idle: bool = False,
    drain_timeout_s: float | None = None,
) -> Iterator[tuple[Consumer, str]]:
    """A real Consumer in a thread, with its own engine under a unique application_name."""
    app = f"consumer-test-{uuid.uuid4().hex[:8]}"
    engine = make_engine(database_url, pool_size=3, application_name=app)
    consumer = Consumer(settings, engine, host, drain_timeout_s=drain_timeout_s)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run(until_idle=until_idle)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="consumer-under-test", daemon=True)
    thread.start()
    try:
        yield consumer, app
    finally:
        consumer.request_stop("test over")
        thread.join(scaled(15))
        engine.dispose()
    assert not thread.is_alive(), "consumer did not stop"
    assert not errors, errors


def wait_started(engine: Engine, settings: Settings, host: str = HOST) -> None:
    """Its status document written and its host row registered (the document comes first: a
    host is active only once its document is readable)."""
    wait_for(lambda: _status_or_none(settings, host) is not None, what=f"status file of {host}")
    wait_for(lambda: _registered(engine, host), what=f"host row of {host}")


def _registered(engine: Engine, host: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT EXISTS (SELECT 1 FROM hosts WHERE name = :n)"),
            {"n": host},
        ).scalar_one()


def wait_status_rewrites(settings: Settings, count: int) -> None:
    """Wait until the status file was rewritten ``count`` more times (heartbeats when idle)."""
    seen = [read_status(settings.state_dir, HOST).updated_at]

    def rewritten() -> bool:
        latest = read_status(settings.state_dir, HOST).updated_at
        if latest > seen[-1]:
            seen.append(latest)
        return len(seen) > count

    wait_for(rewritten, what=f"{count} status rewrites")


def _status_or_none(settings: Settings, host: str) -> Any:
    try:
        return read_status(settings.state_dir, host)
    except Exception:
        return None


def consumer_env(settings: Settings) -> dict[str, str]:
    env = scrubbed_env()
    env.update(
        {
            "SCRAPEFLEET_DATABASE_URL": str(settings.database_url),
            "SCRAPEFLEET_STATE_DIR": str(settings.state_dir),
            "SCRAPEFLEET_BOOT_ID_FILE": str(settings.boot_id_file),
            "SCRAPEFLEET_CONSUMER_POLL_S": str(settings.consumer_poll_s),
            "SCRAPEFLEET_HEARTBEAT_S": str(settings.heartbeat_s),
            "SCRAPEFLEET_BACKOFF_BASE_S": str(settings.backoff_base_s),
            "SCRAPEFLEET_JOB_TIMEOUT_S": str(settings.job_timeout_s),
        }
    )
    return env


@contextmanager
def consumer_process(
    settings: Settings, tmp_path: Path, *args: str, host: str = HOST, log_path: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``scrapefleet-consumer run`` for ``host``; SIGKILLed if still running at the end, its
    output (in ``log_path``, else a file of its own) shown on stderr."""
    log_path = log_path or tmp_path / f"consumer-{uuid.uuid4().hex[:6]}.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [CONSUMER_BIN, "run", "--host", host, "--register", *args],
            env=consumer_env(settings),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        sys.stderr.write(log_path.read_text()[-3000:])


# ---------------------------------------------------------------- tests


def test_claims_and_completes(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=4)
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        ids = queue_jobs(engine, [NewJob("noop") for _ in range(25)])
        wait_for(lambda: all_in(engine, ids, "completed"), what="25 completed jobs")
        wait_for(lambda: read_status(settings.state_dir, HOST).running == 0, what="running 0")
        assert read_status(settings.state_dir, HOST).stuck == 0
    row = job_row(engine, ids[0])
    assert row.result == {"ok": True} and row.attempts == 1
    assert transitions(engine, ids[0])[-1] == ("processing", "completed")
    status = read_status(settings.state_dir, HOST)
    assert status.state == "offline" and status.capacity == 4 and status.boot_id == "boot-1"
    assert status.daemon == "stopped"
    # Budgets count what leaks: noop jobs never bring a restart or a reboot closer.
    assert host_row(engine).jobs_since_boot == 0


@register("test_light_thread", light=True)
def _light_thread(params: Any) -> dict[str, Any]:
    return {"thread": threading.current_thread().name}


@register("test_plain_thread")
def _plain_thread(params: Any) -> dict[str, Any]:
    return {"thread": threading.current_thread().name}


@register("test_light_but_slow", light=True)
def _light_but_slow(params: Any) -> dict[str, Any]:
    time.sleep(0.15)  # what a light action must not do: the warning names it
    return {"thread": threading.current_thread().name}


def test_light_jobs_run_in_the_claiming_thread_the_others_in_workers(
    engine: Engine, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=6)
    kinds = ["test_light_thread", "test_plain_thread", "test_light_but_slow"] * 2
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        ids = queue_jobs(engine, [NewJob(kind) for kind in kinds])
        wait_for(lambda: all_in(engine, ids, "completed"), what="6 completed jobs")
    threads = {i: job_row(engine, i).result["thread"] for i in ids}
    for job_id, kind in zip(ids, kinds, strict=True):
        if kind == "test_plain_thread":
            assert threads[job_id].startswith(f"job-{HOST}"), threads
        else:
            assert threads[job_id] == "consumer-under-test", threads
    slow = [r for r in caplog.records if "light kind 'test_light_but_slow'" in r.getMessage()]
    assert len(slow) == 1, [r.getMessage() for r in slow]  # once per kind, not per job
    assert transitions(engine, ids[0]) == [
        (None, "pending"),
        ("pending", "queued"),
        ("queued", "processing"),
        ("processing", "completed"),
    ]


def test_respects_capacity(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=3)
    with consumer_thread(settings, database_url) as (consumer, _):
        wait_started(engine, settings)
        ids = queue_jobs(engine, [NewJob("noop", {"sleep_s": 0.2}) for _ in range(12)])
        seen: list[int] = []

        def sample() -> None:
            seen.append(processing_on(engine))
            seen.append(consumer.running)
            seen.append(read_status(settings.state_dir, HOST).running)

        wait_for(lambda: all_in(engine, ids, "completed"), what="12 completed", between=sample)
    assert max(seen) == 3, seen  # used every slot, never more


def test_retries_with_backoff_then_fails(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2)
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        (job_id,) = queue_jobs(engine, [NewJob("noop", {"fail": True}, max_attempts=3)])
        wait_for(
            lambda: all_in(engine, [job_id], "failed"),
            what="job failed",
            between=lambda: assign_due_pending(engine),
        )
    row = job_row(engine, job_id)
    assert row.attempts == 3
    assert row.last_error.startswith("Traceback (most recent call last):")
    assert "RuntimeError: noop asked to fail" in row.last_error
    with engine.connect() as conn:
        events = conn.execute(
            sa.text(
                "SELECT from_status, to_status, at FROM job_events WHERE job_id = :id ORDER BY id"
            ),
            {"id": job_id},
        ).all()
    steps = [(e.from_status, e.to_status) for e in events]
    retries = [i for i, step in enumerate(steps) if step == ("processing", "pending")]
    assert len(retries) == 2
    # Each retry waited for its backoff (base 0.1 s, doubling, +/- 20 %) before re-assignment.
    for n, i in enumerate(retries):
        waited = (events[i + 1].at - events[i].at).total_seconds()
        assert waited >= 0.1 * 2**n * 0.8 - 0.01, (n, waited)


def test_recovers_its_own_processing_jobs_at_start(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url)
    with engine.begin() as conn:
        store.register_consumer(conn, HOST, 6, "boot-0")
    again, exhausted = queue_jobs(
        engine, [NewJob("noop", max_attempts=3), NewJob("noop", max_attempts=1)]
    )
    with engine.begin() as conn:  # a consumer claimed them, then died
        assert len(store.claim_jobs(conn, HOST, 6).jobs) == 2
    with consumer_thread(settings, database_url):
        # An interrupted attempt is a release, not a failure: even a job on its last attempt
        # runs again, and neither spends an attempt on its host's crash.
        wait_for(
            lambda: all_in(engine, [again, exhausted], "completed"),
            what="recovered jobs completed",
            between=lambda: assign_due_pending(engine),
        )
    for job_id in (again, exhausted):
        row = job_row(engine, job_id)
        assert (row.attempts, row.releases) == (1, 1), row
    recovered = [e for e in transitions(engine, exhausted) if e == ("processing", "pending")]
    assert len(recovered) == 1


def test_operator_drain_then_enable(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2)
    with consumer_thread(settings, database_url) as (consumer, _):
        wait_started(engine, settings)
        (long_job,) = queue_jobs(engine, [NewJob("noop", {"sleep_s": 1.0})])
        wait_for(lambda: all_in(engine, [long_job], "processing"), what="job processing")
        with engine.begin() as conn:
            store.drain_host(conn, HOST)
        wait_for(lambda: consumer.state == "draining", what="consumer sees the drain")
        # In-flight work finishes while draining; work queued anyway is not claimed.
        held = queue_jobs(engine, [NewJob("noop")])
        wait_for(lambda: all_in(engine, [long_job], "completed"), what="in-flight job done")
        wait_status_rewrites(settings, 3)
        assert all_in(engine, held, "queued")
        operator_drained = read_status(settings.state_dir, HOST)
        # The host drains; the daemon does not: it runs on and will claim once enabled.
        assert operator_drained.state == "draining" and operator_drained.daemon == "running"
        with engine.begin() as conn:
            store.enable_host(conn, HOST)
        wait_for(lambda: all_in(engine, held, "completed"), what="claims again once enabled")
        assert consumer.state == "active"


def test_an_operator_drain_outlives_a_consumer_restart(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2)
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        with engine.begin() as conn:
            store.drain_host(conn, HOST)
    # Stopped while drained by an operator: not offline, or its next start would take work.
    assert (host_row(engine).state, host_row(engine).state_reason) == (
        "draining",
        "drained by operator",
    )
    with consumer_thread(settings, database_url) as (consumer, _):
        held = queue_jobs(engine, [NewJob("noop")])
        wait_status_rewrites(settings, 2)
        assert consumer.state == "draining" and all_in(engine, held, "queued")


def test_a_stopped_job_is_ended_on_its_host_and_stays_cancelled(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2)
    with consumer_thread(settings, database_url) as (consumer, _):
        wait_started(engine, settings)
        stopped, other = queue_jobs(
            engine, [NewJob("noop", {"sleep_s": 2.0}), NewJob("noop", {"sleep_s": 2.0})]
        )
        wait_for(lambda: all_in(engine, [stopped, other], "processing"), what="both running")
        with engine.begin() as conn:
            assert store.stop_jobs(conn, [stopped, other + 1000]) == [stopped]
        # The next heartbeat gives it up: its thread is counted stuck until it returns.
        wait_for(lambda: consumer.stuck == 1, what="the stopped attempt given up")
        wait_for(lambda: all_in(engine, [other], "completed"), what="the other job completes")
        wait_for(lambda: consumer.stuck == 0, what="the stopped attempt's thread returned")
    row = job_row(engine, stopped)
    assert (row.status, row.last_error) == ("cancelled", "stopped by operator")
    assert transitions(engine, stopped)[-1] == ("processing", "cancelled")


def test_a_drain_past_its_bound_stops_cold_and_loses_no_job(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=1)
    with consumer_thread(settings, database_url, drain_timeout_s=0.5) as (consumer, _):
        wait_started(engine, settings)
        (slow,) = queue_jobs(engine, [NewJob("noop", {"sleep_s": 4.0}, max_attempts=3)])
        wait_for(lambda: all_in(engine, [slow], "processing"), what="the slow job running")
        waiting = queue_jobs(engine, [NewJob("noop")])  # no free slot: stays queued
        consumer.request_stop("test stop")
        wait_for(lambda: consumer.lifecycle.state is DaemonState.STOPPED, what="the stop")
        assert consumer.lifecycle.cold
        # Not waited for (a warm drain would have let it complete): ended as after a crash.
        row = job_row(engine, slow)
        assert row.status == "pending" and row.host is None
        assert (row.attempts, row.releases) == (0, 1)  # given back: the job did not fail
        assert row.last_error.startswith("interrupted")
        assert all_in(engine, waiting, "pending")
        assert consumer.stuck == 1  # its thread still sleeps in the action
        assert read_status(settings.state_dir, HOST).daemon == "stopped"
        wait_for(lambda: consumer.stuck == 0, what="the let-go thread to return")
    # What it returned late was dropped: the job is pending, never completed.
    assert job_row(engine, slow).status == "pending"
    assert ("processing", "completed") not in transitions(engine, slow)
    assert host_row(engine).state == "offline"


def test_kill_9_mid_job_then_restart_loses_and_repeats_nothing(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url)
    with consumer_process(settings, tmp_path, "--capacity", "2") as first:
        wait_started(engine, settings)
        ids = queue_jobs(engine, [NewJob("noop", {"sleep_s": 3.0}) for _ in range(2)])
        ids += queue_jobs(engine, [NewJob("noop") for _ in range(4)])
        wait_for(lambda: all_in(engine, ids[:2], "processing"), what="2 jobs mid-run")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(5)
    assert all_in(engine, ids[:2], "processing")
    with consumer_process(settings, tmp_path, "--capacity", "2"):
        wait_for(
            lambda: all_in(engine, ids, "completed"),
            timeout_s=20,
            what="every job completed after the restart",
            between=lambda: assign_due_pending(engine),
        )
    for job_id in ids:
        steps = transitions(engine, job_id)
        assert steps.count(("processing", "completed")) == 1, (job_id, steps)
    for job_id in ids[:2]:
        steps = transitions(engine, job_id)
        assert steps.count(("queued", "processing")) == 2
        assert ("processing", "pending") in steps  # recovered at the restart


def test_status_json_parses(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=5)
    env = consumer_env(settings)
    missing = subprocess.run(
        [CONSUMER_BIN, "status", "--json", "--host", HOST], env=env, capture_output=True, text=True
    )
    assert missing.returncode == 1 and missing.stdout == ""
    assert len(missing.stderr.strip().splitlines()) == 1 and HOST in missing.stderr
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        done = subprocess.run(
            [CONSUMER_BIN, "status", "--json", "--host", HOST],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    status = parse_status(done.stdout)
    assert status.host == HOST and status.capacity == 5 and status.state == "active"
    assert status.daemon == "running"
    assert status.pid == os.getpid() and status.memory_total_bytes > 0
    assert json.loads(done.stdout)["boot_id"] == "boot-1"


def test_job_timeout_frees_the_slot(engine: Engine, database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2, job_timeout_s=0.5)
    with consumer_thread(settings, database_url) as (consumer, _):
        wait_started(engine, settings)
        started = time.monotonic()
        (slow,) = queue_jobs(engine, [NewJob("noop", {"sleep_s": 3.0}, max_attempts=1)])
        wait_for(lambda: all_in(engine, [slow], "failed"), what="timed-out job failed")
        assert time.monotonic() - started < 2.5
        assert "job_timeout_s" in job_row(engine, slow).last_error
        # The document says so at once (not at the next heartbeat): the producer adds it to
        # the database's count of the host's jobs.
        stuck_reported = read_status(settings.state_dir, HOST)
        assert consumer.stuck == 1 and stuck_reported.stuck == 1 and stuck_reported.running == 1
        (quick,) = queue_jobs(engine, [NewJob("noop")])
        wait_for(lambda: all_in(engine, [quick], "completed"), what="the other slot still works")
        assert consumer.stuck == 1  # its thread is still asleep in the action
        wait_for(lambda: consumer.stuck == 0, what="stuck thread returned")
        wait_for(lambda: read_status(settings.state_dir, HOST).running == 0, what="running 0")
        assert read_status(settings.state_dir, HOST).stuck == 0
    assert job_row(engine, slow).status == "failed"  # the late return changed nothing


def test_survives_dropped_database_connections(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=3)

    def kill_backends(app: str) -> int:
        with engine.begin() as conn:
            return conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                    " AND (application_name = :app OR application_name = :listen)"
                ),
                {"app": app, "listen": f"scrapefleet-consumer {HOST} listen"},
            ).scalar_one()

    with consumer_thread(settings, database_url) as (consumer, app):
        wait_started(engine, settings)
        first = queue_jobs(engine, [NewJob("noop") for _ in range(5)])
        wait_for(lambda: all_in(engine, first, "completed"), what="first batch")
        running = queue_jobs(engine, [NewJob("noop", {"sleep_s": 0.5}) for _ in range(3)])
        wait_for(lambda: consumer.running == 3, what="jobs running")
        assert kill_backends(app) >= 1
        wait_for(lambda: all_in(engine, running, "completed"), what="results written anyway")
        assert kill_backends(app) >= 1
        after = queue_jobs(engine, [NewJob("noop") for _ in range(5)])
        wait_for(lambda: all_in(engine, after, "completed"), what="claims after reconnect")


def test_until_idle_exits_when_nothing_is_left(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url)
    with engine.begin() as conn:
        store.register_consumer(conn, HOST, 6, "boot-1")
    ids = queue_jobs(engine, [NewJob("noop") for _ in range(3)])
    result = subprocess.run(
        [CONSUMER_BIN, "--host", HOST, "--until-idle"],
        env=consumer_env(settings),
        capture_output=True,
        text=True,
        timeout=scaled(20),
    )
    assert result.returncode == 0, result.stderr
    assert all_in(engine, ids, "completed")


def test_bad_setting_and_unreachable_database(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(tmp_path, database_url)
    env = consumer_env(settings)
    bad = subprocess.run(
        [CONSUMER_BIN, "run", "--capacity", "0"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "capacity" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    env["SCRAPEFLEET_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:1/nothing"
    down = subprocess.run([CONSUMER_BIN, "run"], env=env, capture_output=True, text=True)
    assert down.returncode == 1 and "database unavailable" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1
