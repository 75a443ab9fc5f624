"""The trust boundary's third round, with the real roles `scrapefleet db grant` makes: what a
consumer's own role could still do to the whole fleet (hold the producer's leader lock, flood
the queue, pause a site at will, write values no tool could read back), refused."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from scrapefleet.common import constants as C
from scrapefleet.common import store
from scrapefleet.common.constants import (
    CHANNEL_FINISHED,
    CHANNEL_SUBMITTED,
    LAST_ERROR_MAX_CHARS,
    PRODUCER_ADVISORY_LOCK_KEY,
)
from scrapefleet.common.db.channels import keyed_channels
from scrapefleet.common.db.engines import Listener
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import ClaimedJob, NewJob
from scrapefleet.consumer.runner import Outcome, bounded_result
from tests.integration import test_db_roles as roles
from tests.integration.test_db_roles import OTHER, OWN, Fleet, queue, refused
from tests.integration.test_host_trust import HealthyProbe, producer_role
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# The roles module's database, roles and engines (a module of their own here).
fleet, admin, own = roles.fleet, roles.admin, roles.own


def _hosts_of_jobs(engine: Engine) -> dict[int, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, host FROM jobs")).all())  # type: ignore[arg-type]


# ---------------------------------------------------------------- the leader lock


def test_a_consumer_cannot_hold_the_producers_leader_lock(
    fleet: Fleet, admin: Engine, own: Engine, tmp_path: Path
) -> None:
    with admin.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob("noop", {})] * 4, default_max_attempts=1).ids
    with own.connect() as held:
        # The consumer's role tries every way to take the key before a producer (re)starts.
        for call in ("pg_advisory_lock", "pg_try_advisory_lock", "pg_advisory_lock_shared"):
            try:
                with held.begin_nested():
                    held.execute(sa.text(f"SELECT {call}(:k)"), {"k": PRODUCER_ADVISORY_LOCK_KEY})
            except sa.exc.ProgrammingError as exc:
                assert "permission denied for function" in str(exc.orig)
        held.commit()  # a session-level lock outlives the transaction: the session holds it
        with producer_role(fleet, tmp_path / "state", HealthyProbe()) as producer:
            producer.run_cycle()
            assert producer.is_leader
            assigned = _hosts_of_jobs(admin)
    assert all(assigned[i] in (OWN, OTHER) for i in ids)
    assert OTHER in assigned.values()  # the healthy host gets work


# ---------------------------------------------------------------- times a consumer writes

YEAR_2900 = "2900-01-01 00:00+00"


def _claimed(admin: Engine, own: Engine, **payload: Any) -> int:
    (job,) = queue(admin, OWN, **payload)
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
    return job


def _profile_of_own(admin: Engine) -> None:
    with admin.begin() as conn:
        conn.execute(sa.text("DELETE FROM profiles"))
        conn.execute(sa.text(f"INSERT INTO profiles (name, host) VALUES ('p-own', '{OWN}')"))


@pytest.mark.parametrize("value", ["infinity", "-infinity", YEAR_2900, "far"])
def test_a_consumers_times_are_refused_out_of_bounds_naming_the_column(
    admin: Engine, own: Engine, value: str
) -> None:
    job = _claimed(admin, own)
    _profile_of_own(admin)
    # "far": within years 2000-3000, yet further ahead than any of them may honestly be.
    when = "now() + interval '1 year'" if value == "far" else f"'{value}'"
    writes = {
        "not_before": f"UPDATE jobs SET not_before = {when} WHERE id = {job}",
        "lingering_until": f"UPDATE jobs SET lingering_until = {when} WHERE id = {job}",
        "heartbeat_at": f"UPDATE jobs SET heartbeat_at = {when} WHERE id = {job}",
        "finished_at": f"UPDATE jobs SET finished_at = {when} WHERE id = {job}",
        "cooldown_until": f"UPDATE profiles SET cooldown_until = {when} WHERE name = 'p-own'",
        "at": f"INSERT INTO host_events (host, event, at) VALUES ('{OWN}', 'restart', {when})",
    }
    for column, write in writes.items():
        if value == "-infinity" and column in ("not_before", "cooldown_until"):
            continue  # a time already past: "no wait", harmless
        assert column in refused(own, write), write
    # What a consumer writes honestly still goes in.
    with own.begin() as conn:
        conn.execute(sa.text(f"UPDATE jobs SET heartbeat_at = now() WHERE id = {job}"))
        conn.execute(
            sa.text(
                "UPDATE profiles SET cooldown_until = now() + interval '30 minutes'"
                " WHERE name = 'p-own'"
            )
        )
        conn.execute(sa.text(f"INSERT INTO host_events (host, event) VALUES ('{OWN}', 'restart')"))


@contextmanager
def unchecked(admin: Engine, *checks: tuple[str, str]) -> Iterator[None]:
    """The CHECKs on (table, column) dropped for the test: a database whose rows predate them
    (restored without them, say) still holds such values, and its readers must survive."""
    with admin.begin() as conn:
        for table, column in checks:
            conn.execute(sa.text(f"ALTER TABLE {table} DROP CONSTRAINT {table}_{column}_sane"))
    try:
        yield
    finally:
        with admin.begin() as conn:
            for table, column in checks:
                bad = f"NOT ({column} > '2000-01-01' AND {column} < '3000-01-01')"
                conn.execute(sa.text(f"UPDATE {table} SET {column} = now() WHERE {bad}"))
                conn.execute(
                    sa.text(
                        f"ALTER TABLE {table} ADD CONSTRAINT {table}_{column}_sane CHECK"
                        f" ({column} IS NULL OR ({column} > '2000-01-01 00:00+00'"
                        f" AND {column} < '3000-01-01 00:00+00'))"
                    )
                )


def test_one_out_of_range_time_takes_no_reader_down(
    fleet: Fleet, admin: Engine, own: Engine, tmp_path: Path
) -> None:
    profiled = NewJob("fetch_page", {"url": "http://x/", "browser": {"profile": "p-own"}})
    checks = (("profiles", "cooldown_until"), ("jobs", "lingering_until"), ("host_events", "at"))
    with unchecked(admin, *checks):
        _profile_of_own(admin)
        with admin.begin() as conn:
            conn.execute(sa.text("UPDATE profiles SET cooldown_until = 'infinity'"))
            conn.execute(
                sa.text(
                    f"INSERT INTO host_events (host, event, at) VALUES ('{OWN}', 'x', 'infinity')"
                )
            )
            (waiting,) = store.insert_jobs(conn, [profiled], default_max_attempts=1).ids
            plain = store.insert_jobs(conn, [NewJob("noop", {})] * 2, default_max_attempts=1).ids
            (old,) = store.insert_jobs(conn, [NewJob("noop", {})], default_max_attempts=1).ids
            conn.execute(
                sa.text(
                    "UPDATE jobs SET status = 'failed', lingering_until = 'infinity',"
                    f" lock_key = 'k' WHERE id = {old}"
                )
            )
        with producer_role(fleet, tmp_path / "state", HealthyProbe(browser="ready")) as producer:
            producer.run_cycle()
        hosts = _hosts_of_jobs(admin)
        assert all(hosts[i] for i in plain)  # the cycle went on
        assert hosts[waiting] is None  # its profile rests (for ever, as the row says)
        env = {"SCRAPEFLEET_DATABASE_URL": fleet.admin_url}
        for command in (["profiles", "list"], ["jobs", "show", str(old)], ["hosts", "list"]):
            shown = CliRunner().invoke(cli, command, env=env)
            assert shown.exit_code == 0, (command, shown.output)
            assert "Traceback" not in shown.output
        settings = load_settings(None, database_url=fleet.admin_url)
        dashboard = create_app(settings, admin).test_client()
        for path in (f"/hosts/{OWN}", f"/jobs/{old}", "/"):
            assert dashboard.get(path).status_code == 200, path


# ---------------------------------------------------------------- a site paused at will


def _job_row(admin: Engine, job: int) -> Any:
    with admin.connect() as conn:
        return conn.execute(
            sa.text(f"SELECT status, host, claims, not_before FROM jobs WHERE id = {job}")
        ).one()


def test_a_consumer_pauses_a_site_once_per_attempt_and_cannot_renew_it(
    admin: Engine, own: Engine
) -> None:
    job = _claimed(admin, own, url="https://shop.test/")
    # Ended rate limited but kept on its host, to claim it again and renew the pause at will.
    kept = (
        "UPDATE jobs SET status = 'pending', error_class = 'rate_limited',"
        f" not_before = now() + interval '50 minutes' WHERE id = {job}"
    )
    assert "row-level security" in refused(own, kept)
    # Its honest end: once, handed back; the job is no longer its to move.
    with own.begin() as conn:
        claim = _job_row(admin, job).claims
        retry = conn.execute(sa.text("SELECT now() + interval '50 minutes'")).scalar_one()
        ended = store.fail_attempt(
            conn, OWN, job, claim, "429", retry_at=retry, error_class="rate_limited"
        )
    assert ended == "pending"
    with own.begin() as conn:
        for renew in (
            f"UPDATE jobs SET status = 'processing', host = '{OWN}' WHERE id = {job}",
            f"UPDATE jobs SET not_before = now() + interval '1 hour' WHERE id = {job}",
        ):
            assert conn.execute(sa.text(renew)).rowcount == 0
    row = _job_row(admin, job)
    assert (row.status, row.host, row.claims) == ("pending", None, claim)


@pytest.mark.parametrize("finished", ["completed", "failed"])
def test_a_consumer_cannot_move_a_finished_job_back_to_processing(
    admin: Engine, own: Engine, finished: str
) -> None:
    job = _claimed(admin, own)
    with own.begin() as conn:
        claim = _job_row(admin, job).claims
        if finished == "completed":
            assert store.complete_job(conn, OWN, job, claim, {})
        else:
            store.fail_attempt(conn, OWN, job, claim, "boom", retry_at=None)
    with own.begin() as conn:
        moved = conn.execute(sa.text(f"UPDATE jobs SET status = 'processing' WHERE id = {job}"))
        assert moved.rowcount == 0
    # Nor an attempt in processing back to queued (to claim it again under a new token).
    (other,) = queue(admin, OWN)
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
    assert "row-level security" in refused(
        own, f"UPDATE jobs SET status = 'queued' WHERE id = {other}"
    )
    assert _job_row(admin, job).status == finished


# ---------------------------------------------------------------- sizes a consumer writes

MIB = 1024 * 1024


def test_a_consumers_oversized_values_are_refused_naming_the_column(
    admin: Engine, own: Engine
) -> None:
    job = _claimed(admin, own)
    big = "x" * (20 * MIB)
    with admin.connect() as conn:
        claim = _job_row(admin, job).claims
    for column, write in (
        ("result", lambda c: store.complete_job(c, OWN, job, claim, {"html": big})),
        (
            "artifacts",
            lambda c: c.execute(
                sa.text("UPDATE jobs SET artifacts = CAST(:a AS jsonb) WHERE id = :j"),
                {"a": '{"notes": "%s"}' % ("n" * MIB), "j": job},
            ),
        ),
        (
            "last_error",
            lambda c: c.execute(
                sa.text("UPDATE jobs SET last_error = :e WHERE id = :j"), {"e": big, "j": job}
            ),
        ),
    ):
        with pytest.raises(sa.exc.DBAPIError) as caught, own.begin() as conn:
            write(conn)
        assert f"jobs_{column}_size" in str(caught.value.orig)
    # The store's own writes of a long error keep its head and its end, within the bound.
    with own.begin() as conn:
        traceback = "Traceback\n" + "  frame\n" * (MIB // 4) + "ValueError: the end"
        store.fail_attempt(conn, OWN, job, claim, traceback, retry_at=None)
    with admin.connect() as conn:
        kept = conn.execute(sa.text(f"SELECT last_error FROM jobs WHERE id = {job}")).scalar_one()
    assert kept.startswith("Traceback") and kept.endswith("ValueError: the end")
    assert len(kept) <= LAST_ERROR_MAX_CHARS


def test_a_result_over_the_setting_fails_its_job_saying_so() -> None:
    job = ClaimedJob(1, "noop", {}, 1, 3, None, False, claim=1)
    big = Outcome.completed({"html": "x" * 5000})
    failed = bounded_result(job.kind, big, 4096)
    assert failed.status == "failed" and not failed.retryable
    assert "over result_max_bytes (4096)" in (failed.error or "")
    assert bounded_result(job.kind, big, 8192) is big


def test_the_migrations_bounds_are_the_constants() -> None:
    migration = importlib.import_module("scrapefleet.migrations.versions.0031_trust_bounds")
    assert migration.RESULT_MAX_BYTES == C.RESULT_MAX_BYTES_LIMIT
    assert migration.LAST_ERROR_MAX_CHARS == C.LAST_ERROR_MAX_CHARS
    assert migration.ARTIFACTS_MAX_BYTES == C.ARTIFACTS_MAX_BYTES
    windows = migration.CONSUMER_TIME_WINDOWS
    skew = migration.SKEW_S
    assert windows[("jobs", "not_before")] == C.RETRY_AFTER_LIMIT_S + skew
    assert windows[("jobs", "lingering_until")] == C.LOCK_LINGER_LIMIT_S + skew


# ---------------------------------------------------------------- spawns


def _spawning(admin: Engine, own: Engine, n: int, kind: str = "noop") -> list[tuple[int, int]]:
    """n jobs of ``kind`` claimed by OWN: (job, claim) each."""
    with admin.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob(kind, {})] * n, default_max_attempts=1).ids
        store.assign_jobs(conn, [(i, OWN) for i in ids])
    with own.begin() as conn:
        return [(j.id, j.claim) for j in store.claim_jobs(conn, OWN, n).jobs]


def _children(admin: Engine) -> list[tuple[str, int]]:
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT kind, count(*) FROM jobs WHERE parent_id IS NOT NULL GROUP BY kind")
        )
        return sorted((r[0], r[1]) for r in rows)


def test_a_consumer_spawns_only_its_jobs_kinds_and_small_payloads(
    admin: Engine, own: Engine
) -> None:
    with admin.begin() as conn:
        conn.execute(sa.text("UPDATE hosts SET capacity = 64"))
    (job, claim), (other, other_claim) = _spawning(admin, own, 2)
    entry = {"payload": {}, "needs_browser": False}
    with own.begin() as conn:
        store.spawn_children(
            conn, OWN, [(job, claim, [entry | {"kind": "noop"}, entry | {"kind": "http_get"}])]
        )
    assert _children(admin) == [("noop", 1)]  # its own kind only: the other was dropped
    huge = {"kind": "noop", "payload": {"x": "y" * C.SPAWN_PAYLOAD_MAX_BYTES}}
    with pytest.raises(sa.exc.DBAPIError, match="payload over"), own.begin() as conn:
        store.spawn_children(conn, OWN, [(other, other_claim, [huge])])


def test_a_consumers_spawn_flood_is_refused_past_the_hosts_rate(admin: Engine, own: Engine) -> None:
    """The repro: jobs of one host each spawning 1,000 children, one after the other."""
    with admin.begin() as conn:
        conn.execute(sa.text("UPDATE hosts SET capacity = 64"))
        store.save_fleet_limits(conn, spawn_per_host_per_minute=2500)
    try:
        flood = [{"kind": "noop", "payload": {"n": n}} for n in range(1000)]
        refusals = []
        for job, claim in _spawning(admin, own, 5):
            try:
                with own.begin() as conn:
                    store.spawn_children(conn, OWN, [(job, claim, flood)])
            except sa.exc.DBAPIError as exc:
                refusals.append(str(exc.orig).splitlines()[0])
        assert _children(admin) == [("noop", 2000)]
        assert len(refusals) == 3
        assert "over spawn_per_host_per_minute (2500)" in refusals[0]
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text("DELETE FROM fleet_limits"))


# ---------------------------------------------------------------- host names, connections


@pytest.mark.parametrize("name", ["../../x", "a/b", "h1\nh2", "..", "x" * 300])
def test_a_host_name_outside_the_rule_is_refused_by_db_grant_and_the_database(
    fleet: Fleet, admin: Engine, name: str
) -> None:
    env = {"SCRAPEFLEET_DATABASE_URL": fleet.admin_url}
    args = ["db", "grant", "--prefix", fleet.prefix, "--consumer", name, "--quiet"]
    shown = CliRunner().invoke(cli, args, env=env)
    assert shown.exit_code == 2, shown.output
    assert "host name" in shown.output and "Traceback" not in shown.output
    with admin.connect() as conn:
        roles = conn.execute(
            sa.text("SELECT count(*) FROM db_roles WHERE host = :h"), {"h": name}
        ).scalar_one()
    assert roles == 0
    with pytest.raises(sa.exc.DBAPIError, match="hosts_name_valid"), admin.begin() as conn:
        conn.execute(sa.text("INSERT INTO hosts (name, capacity) VALUES (:n, 1)"), {"n": name})


def test_a_consumers_role_has_a_connection_limit(fleet: Fleet, admin: Engine) -> None:
    with admin.connect() as conn:
        limit = conn.execute(
            sa.text("SELECT rolconnlimit FROM pg_roles WHERE rolname = :r"),
            {"r": fleet.names.consumer(OWN)},
        ).scalar_one()
    assert limit == C.CONSUMER_CONNECTION_LIMIT


# ---------------------------------------------------------------- the producer's channels


def test_a_consumers_notify_flood_never_reaches_the_producer(
    fleet: Fleet, admin: Engine, own: Engine
) -> None:
    job = _claimed(admin, own)
    channels = [CHANNEL_FINISHED, CHANNEL_SUBMITTED]
    producer = Listener(fleet.url(fleet.names.producer), channels, resolve=keyed_channels)
    heard: list[str] = []
    try:
        producer.wait(0)  # connects and LISTENs, as the producer's wake-up does
        # The consumer's role cannot learn the channels' names, and those it can guess reach
        # nobody however many it sends.
        assert "may not learn" in refused(own, f"SELECT fleet_channel('{CHANNEL_FINISHED}')")
        assert "permission denied" in refused(own, "SELECT channel_key FROM fleet_secrets")
        with own.connect() as conn:
            for channel in channels:
                conn.execute(
                    sa.text("SELECT pg_notify(:c, g::text) FROM generate_series(1, 5000) g"),
                    {"c": channel},
                )
            conn.commit()
        # Its real completion does wake the producer (the trigger, as the owner), and
        # NOTIFYs arrive in commit order: the flood, had it been heard, would come first.
        with own.begin() as conn:
            assert store.complete_job(conn, OWN, job, _job_row(admin, job).claims, {})

        def completion_heard() -> bool:
            heard.extend(producer.wait(0.2))
            return OWN in heard

        wait_for(completion_heard, scaled(5), "the completion's NOTIFY")
    finally:
        producer.close()
    assert heard == [OWN]


def test_a_consumer_learns_and_hears_its_own_hosts_channel_only(
    fleet: Fleet, admin: Engine, own: Engine
) -> None:
    assert "may learn host" in refused(own, f"SELECT host_channel('{OTHER}')")
    with own.connect() as conn:
        mine = conn.execute(sa.text(f"SELECT host_channel('{OWN}')")).scalar_one()
    with admin.connect() as conn:
        names = [
            conn.execute(sa.text(f"SELECT host_channel('{h}')")).scalar_one()
            for h in (OWN, OTHER, "x" * 253)
        ]
    assert names[0] == mine and len(set(names)) == 3
    assert all(len(n.encode()) <= 63 and n.isascii() for n in names)
