"""What a consumer's role can still do to its own host row, with the real roles `db grant`
makes: hold it locked (nobody waits for it), move it (only a consumer's moves, never out of an
operator's drain or disable), write times and artifacts (bounded, so no tool crashes on them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command as alembic
from click.testing import CliRunner
from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.db.migrate import alembic_config
from scrapefleet.common.errors import HostBusy, ProbeError, SubmitError
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store import HostSpec, JobFilter, NewJob
from scrapefleet.common.store.statuses import HostState
from scrapefleet.producer.probes.local_probe import HostTarget
from scrapefleet.producer.producer_daemon import Producer
from tests.host_status_factory import status_for
from tests.integration.producer_helpers import producer_settings
from tests.integration.test_db_roles import (  # noqa: F401  (fixtures)
    OTHER,
    OWN,
    Fleet,
    admin,
    fleet,
    own,
    queue,
    refused,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class HealthyProbe:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        return {t.name: status_for(t.name, **self.fields) for t in targets}

    def close(self) -> None:
        pass


def _try(engine: Engine, statement: str) -> None:
    """Run it; a refusal is fine (what matters is what the row says afterwards)."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    except sa.exc.DBAPIError:
        pass


@contextmanager
def row_held(own: Engine) -> Iterator[Connection]:  # noqa: F811
    """OWN's consumer role holds its host row locked, with no timeout of its own, by whatever
    means its grants leave it: SELECT ... FOR UPDATE, else a write through its functions."""
    with own.connect() as conn:
        conn.execute(sa.text("SET statement_timeout = 0"))
        conn.execute(sa.text("SET idle_in_transaction_session_timeout = 0"))
        try:
            with conn.begin_nested():
                conn.execute(sa.text(f"SELECT name FROM hosts WHERE name = '{OWN}' FOR UPDATE"))
        except sa.exc.ProgrammingError:  # no UPDATE privilege: no row lock that way
            conn.execute(sa.text(f"SELECT host_heartbeat('{OWN}')"))
        yield conn
        conn.rollback()


def _hosts_of_jobs(engine: Engine) -> dict[int, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, host FROM jobs")).all())  # type: ignore[arg-type]


# ---------------------------------------------------------------- no row a consumer holds stalls


@contextmanager
def producer_role(fleet: Fleet, state_dir: Path, probe: HealthyProbe) -> Iterator[Producer]:  # noqa: F811
    """A real Producer logged in as the producer's role."""
    url = fleet.url(fleet.names.producer)
    engine = make_engine(url, pool_size=3)
    producer = Producer(producer_settings(url, state_dir), engine, probe)
    try:
        yield producer
    finally:
        producer.stop()
        engine.dispose()


def cycle_goes_on(producer: Producer, done: Callable[[], bool], what: str) -> None:
    """A producer's cycle, run while a row is held: ``done`` within seconds, and the cycle
    ends (a cycle that waits for the row would run until the lock timeout)."""
    cycle = threading.Thread(target=producer.run_cycle, daemon=True)
    cycle.start()
    try:
        wait_for(done, scaled(5), what)
    finally:
        cycle.join(scaled(5))
    assert not cycle.is_alive(), "the producer's cycle waited for the held row"


def test_a_consumer_holding_its_row_does_not_stall_assignment(
    fleet: Fleet,  # noqa: F811
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
    tmp_path: Path,
) -> None:
    with admin.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop", {})] * 4, default_max_attempts=1)
    with producer_role(fleet, tmp_path / "state", HealthyProbe()) as producer:
        with row_held(own):
            # The other host keeps being probed and assigned while OWN's row stays locked.
            cycle_goes_on(
                producer,
                lambda: OTHER in _hosts_of_jobs(admin).values(),
                "jobs assigned while a consumer holds its own host row",
            )
            with admin.connect() as conn:
                seen = dict(conn.execute(sa.text("SELECT name, last_seen_at FROM hosts")).all())
            assert seen[OTHER] is not None  # its health written
            assert seen[OWN] is None  # OWN's left for a later cycle
            # An operator's command is refused with one line rather than hanging.
            for command in (store.drain_host, store.enable_host, store.remove_host):
                busy = pytest.raises(HostBusy, match="locked by another session")
                with busy, admin.begin() as conn:
                    command(conn, OWN)
            with pytest.raises(HostBusy), admin.begin() as conn:  # re-provisioning it
                store.add_host(conn, HostSpec(name=OWN, capacity=4))
        producer.run_cycle()  # released: OWN's health is written again
    with admin.connect() as conn:
        assert conn.execute(
            sa.text(f"SELECT last_seen_at IS NOT NULL FROM hosts WHERE name = '{OWN}'")
        ).scalar_one()


def test_a_consumer_holding_its_profile_row_does_not_stall_assignment(
    fleet: Fleet,  # noqa: F811
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
    tmp_path: Path,
) -> None:
    profiled = NewJob("fetch_page", {"url": "http://x/", "browser": {"profile": "p-own"}})
    with admin.begin() as conn:  # p-own bound to OWN by an earlier job, finished since
        conn.execute(sa.text("DELETE FROM profiles"))
        (earlier,) = store.insert_jobs(conn, [profiled], default_max_attempts=1).ids
        store.assign_jobs(conn, [(earlier, OWN)])
        store.bind_profiles(conn, [(earlier, "p-own", OWN)])
        conn.execute(sa.text(f"UPDATE jobs SET status = 'cancelled' WHERE id = {earlier}"))
        (waiting,) = store.insert_jobs(conn, [profiled], default_max_attempts=1).ids
        plain = store.insert_jobs(conn, [NewJob("noop", {})] * 2, default_max_attempts=1).ids
    with producer_role(fleet, tmp_path / "state", HealthyProbe(browser="ready")) as producer:
        with own.connect() as conn:
            conn.execute(sa.text("SET statement_timeout = 0"))
            conn.execute(sa.text("SELECT name FROM profiles WHERE name = 'p-own' FOR UPDATE"))
            cycle_goes_on(
                producer,
                lambda: all(_hosts_of_jobs(admin)[i] for i in plain),
                "jobs assigned while a consumer holds its profile's row",
            )
            assert _hosts_of_jobs(admin)[waiting] is None  # its profile's row was held
            conn.rollback()
        producer.run_cycle()
    assert _hosts_of_jobs(admin)[waiting] == OWN


def test_an_operators_drain_does_not_wait_for_the_jobs_a_consumer_holds(
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    held, free = queue(admin, OWN, 2)
    with own.connect() as conn:
        conn.execute(sa.text("SET statement_timeout = 0"))
        conn.execute(sa.text(f"SELECT id FROM jobs WHERE id = {held} FOR UPDATE"))
        started = time.monotonic()
        with admin.begin() as operator:
            assert store.drain_host(operator, OWN) == [free]
        assert time.monotonic() - started < scaled(5)
        # Removing it now would leave the held job queued on no host: refused instead.
        busy = pytest.raises(HostBusy, match="queued jobs locked")
        with busy, admin.begin() as operator:
            store.remove_host(operator, OWN)
        conn.rollback()
    with admin.begin() as operator:
        store.remove_host(operator, OWN)
    assert _hosts_of_jobs(admin) == {held: None, free: None}


def test_an_operators_job_commands_say_busy_rather_than_hang(
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    (held,) = queue(admin, OWN)
    with own.connect() as conn:
        conn.execute(sa.text("SET statement_timeout = 0"))
        conn.execute(sa.text(f"SELECT id FROM jobs WHERE id = {held} FOR UPDATE"))
        started = time.monotonic()
        busy = pytest.raises(SubmitError, match="locked by another session")
        with busy, admin.begin() as operator:
            store.cancel_jobs(operator, JobFilter(ids=[held]))
        assert time.monotonic() - started < scaled(5)
        conn.rollback()
    with admin.begin() as operator:
        assert store.cancel_jobs(operator, JobFilter(ids=[held])) == [held]


# ---------------------------------------------------------------- a consumer's moves only


@pytest.mark.parametrize("chosen", [HostState.DRAINING, HostState.DISABLED])
def test_a_consumer_cannot_undo_an_operators_choice(
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
    chosen: HostState,
) -> None:
    with admin.begin() as conn:
        if chosen is HostState.DRAINING:
            store.drain_host(conn, OWN)
        else:
            store.set_host_state(conn, OWN, chosen, "disabled by operator")
    _try(own, f"UPDATE hosts SET state = 'active' WHERE name = '{OWN}'")
    _try(own, f"UPDATE hosts SET state_reason = 'consumer stopping' WHERE name = '{OWN}'")
    _try(own, f"SELECT host_set_state('{OWN}', 'active', 'mine', NULL, false)")
    _try(own, f"SELECT host_set_state('{OWN}', 'offline', 'mine', NULL, false)")
    if chosen is HostState.DISABLED:  # refused outright
        with pytest.raises(sa.exc.DBAPIError, match="may not move it"), own.begin() as conn:
            store.set_host_state(conn, OWN, HostState.ACTIVE, "consumer started")
    else:  # an operator's drain: the move does not happen (a consumer may race with it)
        with own.begin() as conn:
            assert not store.set_host_state(conn, OWN, HostState.ACTIVE, "consumer started")
            assert not store.set_host_state(conn, OWN, HostState.OFFLINE, "consumer stopped")
    with own.begin() as conn:  # what a real consumer's start does: the operator's state stays
        registration = store.register_consumer(conn, OWN, 6, "boot-2")
        assert not store.reactivate_after_own_drain(conn, OWN, "consumer stopping")
    assert registration.state == chosen
    with admin.connect() as conn:
        row = conn.execute(
            sa.text(f"SELECT state, state_reason FROM hosts WHERE name = '{OWN}'")
        ).one()
    assert row.state == chosen and row.state_reason != "consumer stopping"


def test_an_operators_drain_takes_over_a_consumers_own(
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    with own.begin() as conn:
        assert store.set_host_state(conn, OWN, HostState.DRAINING, "consumer stopping")
    with admin.begin() as conn:
        store.drain_host(conn, OWN)
    with own.begin() as conn:
        assert not store.reactivate_after_own_drain(conn, OWN, "consumer stopping")
        assert store.register_consumer(conn, OWN, 6, "boot-3").state == HostState.DRAINING
    with admin.connect() as conn:
        reason = conn.execute(
            sa.text(f"SELECT state_reason FROM hosts WHERE name = '{OWN}'")
        ).scalar_one()
    assert reason == "drained by operator"


def test_a_consumer_still_makes_its_own_moves(admin: Engine, own: Engine) -> None:  # noqa: F811
    with own.begin() as conn:
        assert store.set_host_state(conn, OWN, HostState.RESTARTING, "restart")
        assert store.set_host_state(conn, OWN, HostState.ACTIVE, "restarted")
        assert store.set_host_state(conn, OWN, HostState.DRAINING, "consumer stopping")
    with own.begin() as conn:  # its own drain it may undo (a restart), or end offline
        assert store.reactivate_after_own_drain(conn, OWN, "consumer stopping")
        store.set_host_state(conn, OWN, HostState.DRAINING, "consumer stopping")
        assert store.offline_after_own_drain(conn, OWN, "consumer stopping", "stopped")
        # Not to disabled, which only an operator chooses.
    with pytest.raises(sa.exc.DBAPIError, match="may not move it"), own.begin() as conn:
        store.set_host_state(conn, OWN, HostState.DISABLED, "mine")


def test_a_consumers_host_writes_are_bounded(admin: Engine, own: Engine) -> None:  # noqa: F811
    for statement in (
        f"UPDATE hosts SET heartbeat_at = 'infinity' WHERE name = '{OWN}'",
        f"UPDATE hosts SET jobs_since_boot = -1000000 WHERE name = '{OWN}'",
        f"SELECT * FROM host_count_claims('{OWN}', -5, 0)",
        f"SELECT * FROM host_count_claims('{OWN}', 5, 6)",
        f"SELECT host_set_stack_counter('{OWN}', 1000000)",
        f"SELECT * FROM host_register('{OWN}', 1000, 'boot')",
        f"SELECT * FROM host_register('{OWN}', 6, repeat('b', 10000))",
        f"SELECT name FROM hosts WHERE name = '{OWN}' FOR UPDATE",
    ):
        with pytest.raises(sa.exc.DBAPIError), own.begin() as conn:
            conn.execute(sa.text(statement))
    with own.begin() as conn:
        assert store.heartbeat(conn, OWN, []).host_state == "active"
    with admin.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT heartbeat_at > now() - interval '1 minute' AS fresh, jobs_since_boot"
                f" FROM hosts WHERE name = '{OWN}'"
            )
        ).one()
    assert row.fresh and row.jobs_since_boot == 0


def test_db_role_host_answers_a_consumer_about_itself_only(
    fleet: Fleet,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    names = fleet.names
    roles = [names.consumer(OWN), names.consumer(OTHER), names.producer, names.reporting]
    with own.connect() as conn:
        answers = {
            r: conn.execute(sa.text("SELECT db_role_host(:r)"), {"r": r}).scalar() for r in roles
        }
    assert answers == {names.consumer(OWN): OWN, **{r: None for r in roles[1:]}}


# ---------------------------------------------------------------- values read back by the tools


def test_the_tools_read_a_host_that_wrote_an_infinite_heartbeat(
    fleet: Fleet,  # noqa: F811
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    _try(own, f"UPDATE hosts SET heartbeat_at = 'infinity' WHERE name = '{OWN}'")
    _try(own, f"UPDATE hosts SET state_changed_at = '-infinity' WHERE name = '{OWN}'")
    (job,) = queue(admin, OWN)
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
    _try(own, f"UPDATE jobs SET heartbeat_at = 'infinity', artifacts = '[1,2]' WHERE id = {job}")
    _try(own, f'UPDATE jobs SET artifacts = \'{{"screenshot": 5, "notes": 7}}\' WHERE id = {job}')

    env = {"SCRAPEFLEET_DATABASE_URL": fleet.admin_url}
    for command in (
        ["hosts", "list"],
        ["status"],
        ["status", "--json"],
        ["jobs", "show", str(job)],
    ):
        shown = CliRunner().invoke(cli, command, env=env)
        # status's verdict: no producer runs in this test (exit 3), every command read it all
        expected = 3 if command[0] == "status" else 0
        assert shown.exit_code == expected, (command, shown.output)
        assert "Traceback" not in shown.output
    settings = load_settings(None, database_url=fleet.admin_url)
    dashboard = create_app(settings, admin).test_client()
    for path in ("/", "/api/status", f"/hosts/{OWN}", f"/jobs/{job}"):
        assert dashboard.get(path).status_code == 200, path


def test_every_definer_function_has_a_fixed_search_path(admin: Engine) -> None:  # noqa: F811
    with admin.connect() as conn:
        loose = conn.execute(
            sa.text(
                "SELECT p.oid::regprocedure::text FROM pg_proc p"
                " WHERE p.pronamespace = to_regnamespace(current_schema()) AND p.prosecdef"
                "   AND NOT coalesce(array_to_string(p.proconfig, ',') LIKE '%search_path=%',"
                "                    false)"
            )
        ).scalars()
        assert list(loose) == []


def test_the_migration_takes_back_the_grants_an_older_db_grant_gave(
    fleet: Fleet,  # noqa: F811
    admin: Engine,  # noqa: F811
    own: Engine,  # noqa: F811
) -> None:
    config = alembic_config(fleet.admin_url)
    write = f"UPDATE hosts SET state_reason = 'mine' WHERE name = '{OWN}'"
    alembic.downgrade(config, "0015")  # gives back 0015's column grants to the consumer roles
    try:
        with own.begin() as conn:
            assert conn.execute(sa.text(write)).rowcount == 1
    finally:
        alembic.upgrade(config, "head")
    assert "permission denied" in refused(own, write)
    own.dispose()  # its pooled sessions planned statements against the old functions
