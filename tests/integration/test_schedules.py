"""Schedules fired by two producers' firing code against real PostgreSQL, on a clock the test
drives: every slot fired exactly once (from the database), none early, a paused schedule none;
a leader killed in the middle of a fire leaves its slot to the standby; catch-up and overlap."""

from __future__ import annotations

import contextlib
import html
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.jobs.recurrence import parse_cron, slots_of
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import JobFilter, NewJob, ScheduleSpec
from scrapefleet.producer.background.fleet_metrics import read_fleet_snapshot
from scrapefleet.producer.background.schedule_firing import Fired, fire_due, fire_one
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import exported_samples, producer_settings
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MONDAY = datetime(2026, 11, 23, tzinfo=UTC)
STEP = timedelta(minutes=20)
WEEK_STEPS = 7 * 24 * 3  # a week of 20-minute ticks
NOOP = NewJob(kind="noop", payload={}, needs_browser=False)


@pytest.fixture
def producers(database_url: str) -> Iterator[tuple[Engine, Engine]]:
    """Two producers' own engines, as two processes would have."""
    engines = (
        make_engine(database_url, application_name="producer-a"),
        make_engine(database_url, application_name="producer-b"),
    )
    yield engines
    for engine in engines:
        engine.dispose()


def add(
    engine: Engine,
    name: str,
    cron: str,
    zone: str = "UTC",
    now: datetime = MONDAY,
    jobs: tuple[NewJob, ...] = (NOOP,),
    **policies: str,
) -> None:
    spec = ScheduleSpec(name, cron, zone, jobs, **policies)
    with engine.begin() as conn:
        store.add_schedule(conn, spec, parse_cron(cron, zone).next_after(now), now)


def runs(engine: Engine, name: str) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT r.slot, r.fired_at, r.outcome, r.missed, r.fired_by, r.job_ids"
                    " FROM schedule_runs r JOIN schedule_defs d ON d.id = r.schedule_id"
                    " WHERE d.name = :name ORDER BY r.slot"
                ),
                {"name": name},
            )
        )


def slots_between(cron: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    parsed, slots = parse_cron(cron, zone), []
    slot = parsed.next_after(start)
    while slot <= end:
        slots.append(slot)
        slot = parsed.next_after(slot)
    return slots


def fire_together(engines: list[tuple[Engine, str]], now: datetime) -> list[Fired]:
    """Every live producer's firing round at the same ``now``, started at the same moment."""
    barrier = threading.Barrier(len(engines))
    fired: list[Fired] = []
    lock = threading.Lock()

    def one(engine: Engine, name: str) -> None:
        barrier.wait(timeout=scaled(10))
        got = fire_due(engine, now, name, default_max_attempts=3)
        with lock:
            fired.extend(got)

    threads = [threading.Thread(target=one, args=pair) for pair in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(30))
    return fired


def test_a_week_with_two_producers_and_leaders_dying_fires_every_slot_exactly_once(
    producers: tuple[Engine, Engine], engine: Engine
) -> None:
    a, b = producers
    add(engine, "daily", "0 7 * * *", "Europe/Paris")
    add(engine, "six-hourly", "15 */6 * * *")
    add(engine, "paused", "*/30 * * * *")
    with engine.begin() as conn:
        assert store.set_schedule_paused(conn, "paused", True)
    for step in range(1, WEEK_STEPS + 1):
        now = MONDAY + step * STEP
        # Each producer is down three hours in nine, never both: A's outages and B's alternate,
        # so fire times fall to one producer alone, to both at once, and to a standby whose
        # leader died just before the slot.
        window = (step // 9) % 3
        alive = [(e, n) for e, n, down in ((a, "a", 0), (b, "b", 1)) if window != down]
        fire_together(alive, now)
    end = MONDAY + WEEK_STEPS * STEP
    for name, cron, zone in (
        ("daily", "0 7 * * *", "Europe/Paris"),
        ("six-hourly", "15 */6 * * *", "UTC"),
    ):
        expected = slots_between(cron, zone, MONDAY, end)
        fired = runs(engine, name)
        assert [r.slot for r in fired] == expected, name
        for run in fired:
            assert run.outcome == "fired" and run.missed == 0 and len(run.job_ids) == 1
            assert run.slot <= run.fired_at < run.slot + STEP  # never early, within a tick
        assert {r.fired_by for r in fired} == {"a", "b"}
    assert runs(engine, "paused") == []
    with engine.connect() as conn:
        jobs = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE kind = 'noop'")).scalar()
        shown = conn.execute(
            sa.text("SELECT name, last_jobs, last_unfinished FROM schedules ORDER BY name")
        ).all()
    assert jobs == 7 + 28
    assert [tuple(row) for row in shown] == [
        ("daily", 1, 1),
        ("paused", 0, 0),
        ("six-hourly", 1, 1),
    ]


def test_a_leader_killed_in_the_middle_of_a_fire_leaves_the_slot_to_its_standby(
    producers: tuple[Engine, Engine], engine: Engine
) -> None:
    a, b = producers
    add(engine, "daily", "0 7 * * *")
    now = MONDAY + timedelta(hours=7, seconds=5)
    dying = a.connect()
    dying.begin()
    (due,) = store.due_schedules(dying, now)
    # A has claimed the slot and inserted its jobs, and has not committed yet.
    assert fire_one(dying, due, now, "a", default_max_attempts=3) is not None
    standby: list[Fired] = []
    thread = threading.Thread(target=lambda: standby.extend(fire_due(b, now, "b", 3)))
    thread.start()
    wait_for(lambda: _waiting_on_a_lock(engine), timeout_s=scaled(10))
    with engine.connect() as conn:  # A dies: its session, and its transaction, with it
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": _pid(dying)})
    thread.join(timeout=scaled(30))
    with contextlib.suppress(sa.exc.OperationalError):
        dying.close()
    assert [(f.name, f.outcome) for f in standby] == [("daily", "fired")]
    (run,) = runs(engine, "daily")
    assert run.fired_by == "b" and len(run.job_ids) == 1
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar() == 1


def _pid(conn: Connection) -> int:
    return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _waiting_on_a_lock(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = 'producer-b' AND wait_event_type = 'Lock'"
                )
            ).scalar()
        )


def test_after_downtime_one_run_stands_for_the_missed_slots_or_none(engine: Engine) -> None:
    add(engine, "once", "0 7 * * *")
    add(engine, "skip", "0 7 * * *", catch_up="skip")
    back = MONDAY + timedelta(days=3, hours=9)  # down from Monday 00:00 to Thursday 09:00
    fired = {f.name: f for f in fire_due(engine, back, "a", default_max_attempts=3)}
    thursday_7 = MONDAY + timedelta(days=3, hours=7)
    assert (fired["once"].slot, fired["once"].outcome, fired["once"].missed) == (
        thursday_7,
        "fired",
        3,
    )
    assert (fired["skip"].outcome, fired["skip"].job_ids) == ("skipped_missed", ())
    assert fire_due(engine, back + timedelta(hours=1), "a", default_max_attempts=3) == []
    with engine.connect() as conn:
        next_runs = set(conn.execute(sa.text("SELECT next_run_at FROM schedule_defs")).scalars())
    assert next_runs == {thursday_7 + timedelta(days=1)}


def test_overlap_skip_waits_for_the_last_runs_jobs(engine: Engine) -> None:
    add(engine, "hourly", "0 * * * *", overlap="skip")
    first = fire_due(engine, MONDAY + timedelta(hours=1), "a", 3)
    assert [f.outcome for f in first] == ["fired"]
    second = fire_due(engine, MONDAY + timedelta(hours=2), "a", 3)
    assert [f.outcome for f in second] == ["skipped_overlap"]
    with engine.begin() as conn:
        store.cancel_jobs(conn, JobFilter(ids=list(first[0].job_ids)))
    third = fire_due(engine, MONDAY + timedelta(hours=3), "a", 3)
    assert [f.outcome for f in third] == ["fired"]


def test_a_resumed_schedule_owes_nothing_for_its_pause(engine: Engine) -> None:
    add(engine, "daily", "0 7 * * *")
    with engine.begin() as conn:
        assert store.set_schedule_paused(conn, "daily", True)
        assert not store.set_schedule_paused(conn, "daily", True)  # already
    assert fire_due(engine, MONDAY + timedelta(days=2), "a", 3) == []
    resumed_at = MONDAY + timedelta(days=2, hours=8)
    with engine.begin() as conn:
        next_run = parse_cron("0 7 * * *").next_after(resumed_at)
        assert store.set_schedule_paused(conn, "daily", False, next_run)
    assert fire_due(engine, resumed_at, "a", 3) == []
    (fired,) = fire_due(engine, next_run, "a", 3)
    assert fired.slot == MONDAY + timedelta(days=3, hours=7) and fired.missed == 0


@pytest.fixture
def named_producers(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[Any]:
    made: list[Producer] = []

    def make(name: str) -> Producer:
        made.append(Producer(producer_settings(database_url, tmp_path), engine, name=name))
        return made[-1]

    yield make
    for producer in made:
        producer.stop()


def test_the_leading_producer_fires_a_due_schedule_and_its_standby_does_not(
    engine: Engine, named_producers: Any
) -> None:
    due_since = datetime.now(UTC) - timedelta(seconds=1)
    spec = ScheduleSpec("daily", "0 7 * * *", "UTC", (NOOP,))
    with engine.begin() as conn:
        store.add_schedule(conn, spec, due_since, due_since)
    leader = named_producers("leader")
    leader.start()
    wait_for(lambda: leader.is_leader, what="the first producer to lead")
    named_producers("standby").start()
    (run,) = wait_for(lambda: runs(engine, "daily") or None, scaled(20), "the slot's run")
    assert (run.slot, run.outcome, run.fired_by, len(run.job_ids)) == (
        due_since,
        "fired",
        "leader",
        1,
    )
    with engine.connect() as conn:
        next_run = conn.execute(sa.text("SELECT next_run_at FROM schedule_defs")).scalar_one()
    assert next_run == parse_cron("0 7 * * *").next_after(run.fired_at)


def test_the_producer_exports_each_schedules_runs(engine: Engine) -> None:
    add(engine, "hourly", "0 * * * *")
    add(engine, "paused", "0 * * * *")
    with engine.begin() as conn:
        store.set_schedule_paused(conn, "paused", True)
    fired_at = MONDAY + timedelta(hours=1)
    (fired,) = fire_due(engine, fired_at, "a", default_max_attempts=3)
    unfinished = read_fleet_snapshot(engine).schedules["hourly"]
    assert unfinished.last_success_timestamp_s is None  # its job has not completed yet
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = :id"),
            {"id": fired.job_ids[0]},
        )
    snapshot = read_fleet_snapshot(engine)
    hourly, paused = snapshot.schedules["hourly"], snapshot.schedules["paused"]
    assert (hourly.last_run_timestamp_s, hourly.last_lag_s) == (fired_at.timestamp(), 0.0)
    assert hourly.last_success_timestamp_s == fired_at.timestamp()
    # Its next slot (Monday 02:00 UTC) is past on the database's clock and nobody fired it.
    assert hourly.overdue_s > 0 and not hourly.paused
    assert (paused.paused, paused.overdue_s, paused.last_run_timestamp_s) == (True, 0.0, None)
    samples = exported_samples(snapshot, "scrapefleet_schedule_", "schedule")
    assert samples[("scrapefleet_schedule_paused", "paused")] == 1.0
    assert samples[("scrapefleet_schedule_last_success_timestamp_seconds", "hourly")] == (
        fired_at.timestamp()
    )
    assert ("scrapefleet_schedule_last_run_timestamp_seconds", "paused") not in samples


def test_the_dashboard_lists_each_schedule_and_its_last_run(
    engine: Engine, database_url: str
) -> None:
    client = create_app(load_settings(None, database_url=database_url), engine).test_client()
    empty = client.get("/schedules").get_data(as_text=True)
    assert 'id="no-schedules"' in empty
    add(engine, "daily", "0 7 * * *", "Europe/Paris")
    add(engine, "hourly", "0 * * * *")
    with engine.begin() as conn:
        store.set_schedule_paused(conn, "daily", True)
    fire_due(engine, MONDAY + timedelta(hours=1, seconds=30), "a", 3)
    often = ScheduleSpec("often", None, "UTC", (NOOP,), every_s=5400.0)
    with engine.begin() as conn:
        store.add_schedule(conn, often, MONDAY + timedelta(minutes=90), MONDAY)
    page = client.get("/schedules")
    assert page.status_code == 200
    rows = re.findall(r'<tr id="schedule-\d+">(.*?)</tr>', page.get_data(as_text=True), re.S)
    daily, hourly, every = (
        " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for row in rows
    )
    assert every.startswith("often every 5400 s active")
    assert daily.startswith("daily 0 7 * * * Europe/Paris paused") and "never run" in daily
    assert hourly.startswith("hourly 0 * * * * UTC active") and "fired 30.0 s 1 0 0 1" in hourly


def test_an_interval_schedule_fires_each_slot_once_under_two_producers(
    producers: tuple[Engine, Engine], engine: Engine
) -> None:
    a, b = producers
    created = MONDAY + timedelta(minutes=7)
    slots = slots_of(None, "UTC", 2700.0, created)
    spec = ScheduleSpec("every-45m", None, "UTC", (NOOP,), every_s=2700.0)
    with engine.begin() as conn:
        store.add_schedule(conn, spec, slots.next_after(created), created)
    for step in range(1, 19):  # six hours of 20-minute ticks
        fire_together([(a, "a"), (b, "b")], MONDAY + step * STEP)
    end = MONDAY + 18 * STEP
    expected = [created + k * timedelta(minutes=45) for k in range(1, 8)]
    assert expected[-1] <= end < expected[-1] + timedelta(minutes=45)
    fired = runs(engine, "every-45m")
    assert [r.slot for r in fired] == expected
    assert all(r.outcome == "fired" and r.missed == 0 and r.fired_at >= r.slot for r in fired)
