"""The trust boundary's third round, with the real roles `scrapefleet db grant` makes: what a
consumer's own role could still do to the whole fleet (hold the producer's leader lock, flood
the queue, pause a site at will, write values no tool could read back), refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import PRODUCER_ADVISORY_LOCK_KEY
from scrapefleet.common.store import NewJob
from tests.integration import test_db_roles as roles
from tests.integration.test_db_roles import OTHER, OWN, Fleet
from tests.integration.test_host_trust import HealthyProbe, producer_role

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
