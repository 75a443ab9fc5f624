"""Database roles by duty against real PostgreSQL, with the real roles `scrapefleet db grant`
makes: a consumer's role reaches its own host row and its own jobs, and nothing else.

Roles are cluster-wide: every name here carries a prefix unique to this run, and they are all
dropped at the end (after the database, which holds their grants). One database and one set of
roles for the module; each test empties the tables it uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import assume_owner_role, libpq_url, make_engine, sqlalchemy_url
from scrapefleet.common.db.migrate import alembic_config
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.ops.db_grant import GrantRequest, apply, role_names
from scrapefleet.common.reads import queries
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import producer_settings
from tests.integration.test_consumer import consumer_thread, make_settings
from tests.throwaway_db import throwaway_database
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

OWN, OTHER = "h1", "h2"


@dataclass(frozen=True)
class Fleet:
    admin_url: str  # the superuser's
    prefix: str

    def url(self, role: str) -> str:
        return (
            sqlalchemy_url(self.admin_url)
            .set(username=role, password=None)
            .render_as_string(hide_password=False)
        )

    @property
    def names(self) -> Any:
        return role_names(self.prefix)


def _drop_roles(admin_url: str, prefix: str) -> None:
    server = sqlalchemy_url(admin_url).set(database="postgres")
    with psycopg.connect(libpq_url(server), autocommit=True) as conn:
        roles = conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s", (f"{prefix}\\_%",)
        ).fetchall()
        for (role,) in roles:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    prefix = f"sfroles_{uuid.uuid4().hex[:8]}"
    admin_url = ""
    try:
        with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_roles") as url:
            admin_url = url
            engine = make_engine(url)
            try:
                request = GrantRequest(role_names(prefix), {OWN: "own secret", OTHER: "other"})
                apply(engine, request)
            finally:
                engine.dispose()
            yield Fleet(url, prefix)
    finally:
        if admin_url:
            _drop_roles(admin_url, prefix)


@pytest.fixture
def admin(fleet: Fleet) -> Iterator[Engine]:
    engine = make_engine(fleet.admin_url, pool_size=2)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE jobs, hosts, job_events, host_events, webhook_deliveries RESTART IDENTITY"
            )
        )
        for name in (OWN, OTHER):
            store.add_host(conn, HostSpec(name=name, capacity=6, address=f"10.9.0.{name[-1]}"))
    yield engine
    engine.dispose()


@pytest.fixture
def own(fleet: Fleet) -> Iterator[Engine]:
    """The OWN host's consumer role."""
    engine = make_engine(fleet.url(fleet.names.consumer(OWN)), pool_size=2)
    yield engine
    engine.dispose()


def queue(
    engine: Engine, host: str, n: int = 1, callback_url: str | None = None, **payload: Any
) -> list[int]:
    job = NewJob("noop", payload, callback_url=callback_url)
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [job] * n, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, host) for i in ids])
    return ids


def refused(engine: Engine, statement: str) -> str:
    """The error the statement gets (it must get one), with nothing changed."""
    with pytest.raises(sa.exc.DBAPIError) as caught, engine.begin() as conn:
        conn.execute(sa.text(statement))
    return str(caught.value.orig)


# ---------------------------------------------------------------- what a consumer cannot do


def test_a_consumer_cannot_read_another_hosts_job(admin: Engine, own: Engine) -> None:
    mine, theirs = queue(admin, OWN, url="mine")[0], queue(admin, OTHER, url="theirs")[0]
    with own.connect() as conn:
        seen: dict[int, Any] = dict(conn.execute(sa.text("SELECT id, payload FROM jobs")).all())
        touched = conn.execute(
            sa.text("UPDATE jobs SET result = '{}' WHERE id = :id"), {"id": theirs}
        ).rowcount
    assert seen == {mine: {"url": "mine"}}
    assert touched == 0
    # Nor through the views, which read as their owner.
    assert "permission denied" in refused(own, "SELECT * FROM recent_failures")


def test_the_shared_views_read_with_the_readers_own_rights(
    fleet: Fleet, admin: Engine, own: Engine
) -> None:
    """ready_jobs and jobs_with_archive (migration 0042) are security_invoker views: a reader
    needs the grants on the tables under them, so they widen no role's reach."""
    queue(admin, OTHER)
    for statement in (
        "SELECT * FROM ready_jobs",
        "SELECT * FROM jobs_with_archive",
        "SELECT * FROM matching_jobs()",
    ):
        assert "permission denied" in refused(own, statement), statement
    reporting = make_engine(fleet.url(fleet.names.reporting), pool_size=1)
    try:
        with reporting.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM matching_jobs()")).scalar_one() == 1
            assert conn.execute(sa.text("SELECT count(*) FROM ready_jobs")).scalar_one() == 0
        # Reading is all it may do: locking the rows under the view needs UPDATE on jobs.
        assert "permission denied" in refused(reporting, "SELECT id FROM ready_jobs FOR UPDATE")
    finally:
        reporting.dispose()


def test_a_consumer_cannot_update_a_hosts_trust_field(admin: Engine, own: Engine) -> None:
    assert "permission denied for table host_access" in refused(
        own, f"UPDATE host_access SET address = '203.0.113.9' WHERE host = '{OWN}'"
    )
    assert "permission denied" in refused(own, "SELECT ssh_key_file FROM host_access")
    # Nor the fields of hosts it has no business changing, nor another host's row.
    assert "permission denied" in refused(
        own, f"UPDATE hosts SET capacity = 64 WHERE name = '{OWN}'"
    )
    # It writes no host row directly at all (only through the host_* functions), and through
    # them never another host's.
    assert "permission denied" in refused(
        own, f"UPDATE hosts SET state = 'disabled' WHERE name = '{OTHER}'"
    )
    assert "may write host" in refused(
        own, f"SELECT host_set_state('{OTHER}', 'disabled', 'x', NULL, false)"
    )
    with admin.connect() as conn:
        access = {h.name: h.address for h in queries.hosts(conn)}
        states: dict[str, str] = dict(conn.execute(sa.text("SELECT name, state FROM hosts")).all())
    assert access == {OWN: "10.9.0.1", OTHER: "10.9.0.2"}
    assert states == {OWN: "active", OTHER: "active"}


def test_a_consumer_cannot_disable_a_trigger(admin: Engine, own: Engine) -> None:
    assert "must be owner" in refused(own, "ALTER TABLE jobs DISABLE TRIGGER USER")
    assert "permission denied" in refused(own, "SET session_replication_role = replica")
    # So its own status changes are audited and announced, by triggers writing where it cannot.
    job = queue(admin, OWN, callback_url="http://receiver.example/done")[0]
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.complete_job(conn, OWN, job, 1, {"forged": False})
    assert "permission denied" in refused(
        own, f"INSERT INTO job_events (job_id, to_status) VALUES ({job}, 'completed')"
    )
    with admin.connect() as conn:
        audit = conn.execute(
            sa.text("SELECT to_status FROM job_events WHERE job_id = :id ORDER BY id"), {"id": job}
        ).scalars()
        assert list(audit) == ["pending", "queued", "processing", "completed"]
        announced = conn.execute(sa.text("SELECT job_id, status FROM webhook_deliveries")).all()
        assert [tuple(r) for r in announced] == [(job, "completed")]


def test_a_consumer_cannot_drop_a_table(admin: Engine, own: Engine) -> None:
    assert "must be owner" in refused(own, "DROP TABLE jobs")
    assert "permission denied" in refused(own, "CREATE TABLE jobs_copy (id int)")
    assert "permission denied" in refused(own, "TRUNCATE jobs")
    with admin.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('jobs') IS NOT NULL")).scalar_one()


# ---------------------------------------------------------------- what each role still does


def test_the_consumer_and_producer_run_their_whole_cycle_with_their_own_roles(
    fleet: Fleet, admin: Engine, tmp_path: Path
) -> None:
    """The real Consumer as OWN's role, the real Producer as the producer role: register,
    claim, heartbeat, complete, fail and retry, hand queued jobs back, audit rows all along."""
    with admin.begin() as conn:  # the consumer registers its own row; no other host to probe
        conn.execute(sa.text("DELETE FROM hosts"))
        # Their access rows went with them (a trigger): OWN is probed locally, not at 10.9.0.1.
        assert conn.execute(sa.text("SELECT count(*) FROM host_access")).scalar_one() == 0
    producer_engine = make_engine(fleet.url(fleet.names.producer), pool_size=3)
    producer = Producer(
        producer_settings(fleet.url(fleet.names.producer), tmp_path / "state"), producer_engine
    )
    consumer_url = fleet.url(fleet.names.consumer(OWN))
    settings = make_settings(tmp_path, consumer_url, capacity=1)
    try:
        with producer_engine.begin() as conn:
            done = store.insert_jobs(conn, [NewJob("noop", {})] * 4, default_max_attempts=2).ids
            failing = store.insert_jobs(
                conn, [NewJob("noop", {"fail": True})], default_max_attempts=2
            ).ids
        with consumer_thread(settings, consumer_url, host=OWN):

            def finished() -> bool:
                producer.run_cycle()
                with admin.connect() as conn:
                    left = conn.execute(
                        sa.text(
                            "SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed')"
                        )
                    ).scalar_one()
                return left == 0

            wait_for(finished, 30, what="every job finished")
            # One job that outlives a few heartbeats fills the only slot; two more queued
            # behind it are handed back when the consumer stops.
            sleeper = queue(admin, OWN, sleep_s=2.5)[0]
            wait_for(lambda: _heartbeat_after_start(admin, sleeper), 10, what="a job heartbeat")
            behind = queue(admin, OWN, 2)
        with admin.connect() as conn:
            handed_back = conn.execute(
                sa.text("SELECT status, host, last_host FROM jobs WHERE id = ANY(:ids)"),
                {"ids": behind},
            ).all()
            status: dict[int, str] = dict(
                conn.execute(sa.text("SELECT id, status FROM jobs")).all()
            )
            host = conn.execute(
                sa.text("SELECT heartbeat_at, jobs_total, boot_id FROM hosts WHERE name = :n"),
                {"n": OWN},
            ).one()
            events = set(
                conn.execute(
                    sa.text("SELECT event FROM host_events WHERE host = :n"), {"n": OWN}
                ).scalars()
            )
            audited = conn.execute(
                sa.text(
                    "SELECT count(DISTINCT job_id) FROM job_events WHERE to_status = 'processing'"
                )
            ).scalar_one()
        assert [status[i] for i in [*done, sleeper]] == ["completed"] * 5
        assert [tuple(r) for r in handed_back] == [("pending", None, OWN)] * 2
        assert status[failing[0]] == "failed"
        assert host.heartbeat_at is not None and host.jobs_total >= 6 and host.boot_id == "boot-1"
        assert {"added", "state"} <= events
        assert audited == 6
    finally:
        producer_engine.dispose()


def _heartbeat_after_start(engine: Engine, job_id: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT heartbeat_at > started_at + interval '0.3 s' FROM jobs"
                    " WHERE id = :id AND status = 'processing'"
                ),
                {"id": job_id},
            ).scalar()
        )


def test_a_consumer_releases_its_own_job_and_no_other(admin: Engine, own: Engine) -> None:
    mine, theirs = queue(admin, OWN)[0], queue(admin, OTHER)[0]
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.release_job(conn, OWN, mine, 1, "stack failing")
        assert not store.release_job(conn, OTHER, theirs, 1, "not mine")
        assert store.requeue_host_queued(conn, OTHER, "not mine either") == []
    with admin.connect() as conn:
        status: dict[int, str] = dict(conn.execute(sa.text("SELECT id, status FROM jobs")).all())
    assert status == {mine: "pending", theirs: "queued"}


def test_the_producer_role_cannot_change_who_is_who_and_reporting_only_reads(
    fleet: Fleet, admin: Engine
) -> None:
    producer = make_engine(fleet.url(fleet.names.producer), pool_size=1)
    reporting = make_engine(fleet.url(fleet.names.reporting), pool_size=1)
    try:
        assert "permission denied" in refused(
            producer, f"INSERT INTO db_roles VALUES ('{fleet.names.producer}x', 'reporting', NULL)"
        )
        assert "must be owner" in refused(producer, "ALTER TABLE jobs DISABLE TRIGGER USER")
        assert "permission denied" in refused(reporting, "DELETE FROM jobs")
        queue(admin, OTHER)
        with reporting.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 1
            assert len(queries.hosts(conn)) == 2
    finally:
        producer.dispose()
        reporting.dispose()


def test_migrations_act_as_the_owner_role(fleet: Fleet) -> None:
    engine = make_engine(fleet.admin_url, pool_size=1)
    try:
        with engine.connect() as conn:
            assert assume_owner_role(conn) == fleet.names.owner
            assert conn.execute(sa.text("SELECT current_user")).scalar_one() == fleet.names.owner
            owners = set(
                conn.execute(
                    sa.text(
                        "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class"
                        " WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'v')"
                    )
                ).scalars()
            )
        assert owners == {fleet.names.owner}
    finally:
        engine.dispose()


def test_db_grant_is_idempotent_and_drops_a_consumer(fleet: Fleet, tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("third host\n")
    base = ["db", "grant", "--url", fleet.admin_url, "--prefix", fleet.prefix, "--quiet"]
    runner = CliRunner()
    added = runner.invoke(cli, [*base, "--consumer", "h3", "--password-file", str(password)])
    assert added.exit_code == 0, added.output
    assert added.output.startswith("changed: ")
    again = runner.invoke(cli, [*base, "--consumer", "h3"])  # no password: keeps its own
    assert again.exit_code == 0, again.output
    assert again.output.startswith("unchanged: "), again.output
    third = fleet.names.consumer("h3")
    assert _roles_named(fleet, third) == [third]
    dropped = runner.invoke(cli, [*base, "--drop-consumer", "h3"])
    assert dropped.exit_code == 0, dropped.output
    assert _roles_named(fleet, third) == []
    bad = runner.invoke(cli, [*base, "--consumer", "h4", "--password-env", "NO_SUCH_VARIABLE_X"])
    assert bad.exit_code == 2 and "NO_SUCH_VARIABLE_X" in bad.output


def _roles_named(fleet: Fleet, role: str) -> list[str]:
    with psycopg.connect(libpq_url(fleet.admin_url)) as conn:
        return [
            r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname = %s", (role,))
        ]


# ---------------------------------------------------------------- the migration


def test_0008_moves_the_trust_fields_with_their_data_and_back() -> None:
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_0008") as url:
        config = alembic_config(url)
        command.downgrade(config, "0007")
        engine = make_engine(url, pool_size=1)
        try:
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "INSERT INTO hosts (name, address, ssh_port, ssh_user, ssh_key_file,"
                        " known_hosts_file) VALUES ('far', '10.0.0.5', 2222, 'svc', '/k', '/kh')"
                    )
                )
                conn.execute(sa.text("INSERT INTO hosts (name) VALUES ('near')"))
                conn.execute(
                    sa.text(
                        "INSERT INTO jobs (kind, status, host) VALUES ('noop', 'queued', 'far')"
                    )
                )
            command.upgrade(config, "0008")
            with engine.connect() as conn:
                hosts = {h.name: h for h in queries.hosts(conn)}
                job = conn.execute(sa.text("SELECT host, last_host FROM jobs")).one()
                columns = _columns(conn, "hosts")
            assert (hosts["far"].address, hosts["far"].ssh_port, hosts["far"].ssh_user) == (
                "10.0.0.5",
                2222,
                "svc",
            )
            assert (hosts["far"].ssh_key_file, hosts["far"].known_hosts_file) == ("/k", "/kh")
            assert (hosts["near"].address, hosts["near"].ssh_port) == (None, 22)
            assert tuple(job) == ("far", None)
            assert "address" not in columns and "ssh_key_file" not in columns

            command.downgrade(config, "0007")
            with engine.connect() as conn:
                back = conn.execute(
                    sa.text(
                        "SELECT address, ssh_port, ssh_user, ssh_key_file, known_hosts_file"
                        " FROM hosts WHERE name = 'far'"
                    )
                ).one()
                assert "last_host" not in _columns(conn, "jobs")
            assert tuple(back) == ("10.0.0.5", 2222, "svc", "/k", "/kh")
        finally:
            engine.dispose()


def _columns(conn: sa.Connection, table: str) -> set[str]:
    rows = conn.execute(
        sa.text("SELECT column_name FROM information_schema.columns WHERE table_name = :t"),
        {"t": table},
    )
    return set(rows.scalars())
