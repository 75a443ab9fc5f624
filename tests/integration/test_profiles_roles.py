"""Profiles under the roles by duty: a consumer's role reads and cools down its own host's
profiles and no other; the producer and reporting roles see them all."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.store import NewJob
from tests.integration import test_db_roles as roles
from tests.integration.test_db_roles import OTHER, OWN, Fleet, refused

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

# The roles module's database, roles and engines (a module of their own here).
fleet, admin, own = roles.fleet, roles.admin, roles.own


def _bound_jobs(admin: Engine) -> dict[str, int]:
    """One job of profile p-HOST queued on each host (the producer's binding, by hand)."""
    jobs = {}
    with admin.begin() as conn:
        conn.execute(sa.text("DELETE FROM profiles"))
        for host in (OWN, OTHER):
            job = NewJob("fetch_page", {"url": "http://x/", "browser": {"profile": f"p-{host}"}})
            (job_id,) = store.insert_jobs(conn, [job], default_max_attempts=3).ids
            store.assign_jobs(conn, [(job_id, host)])
            store.bind_profiles(conn, [(job_id, f"p-{host}", host)])
            jobs[host] = job_id
    return jobs


def test_a_consumer_sees_and_cools_only_its_own_hosts_profiles(admin: Engine, own: Engine) -> None:
    jobs = _bound_jobs(admin)
    with own.begin() as conn:
        seen = conn.execute(sa.text("SELECT name FROM profiles")).scalars().all()
        assert seen == [f"p-{OWN}"]
        assert store.cool_profile_after_block(conn, jobs[OWN], 60) == f"p-{OWN}"
        assert store.cool_profile_after_block(conn, jobs[OTHER], 60) is None
        theirs = conn.execute(
            sa.text("UPDATE profiles SET blocks = 99 WHERE name = :n"), {"n": f"p-{OTHER}"}
        ).rowcount
        assert theirs == 0
    with admin.connect() as conn:
        blocks = dict(conn.execute(sa.text("SELECT name, blocks FROM profiles")).all())
    assert blocks == {f"p-{OWN}": 1, f"p-{OTHER}": 0}


def test_a_consumer_cannot_rebind_insert_or_delete_a_profile(admin: Engine, own: Engine) -> None:
    _bound_jobs(admin)
    assert "permission denied" in refused(own, f"UPDATE profiles SET host = '{OTHER}'")
    assert "permission denied" in refused(own, "INSERT INTO profiles (name) VALUES ('mine')")
    assert "permission denied" in refused(own, "DELETE FROM profiles")


def test_the_producer_and_reporting_roles_see_every_profile(fleet: Fleet, admin: Engine) -> None:
    _bound_jobs(admin)
    for role in (fleet.names.producer, fleet.names.reporting):
        engine = make_engine(fleet.url(role), pool_size=1)
        try:
            with engine.connect() as conn:
                names = conn.execute(sa.text("SELECT name FROM profiles ORDER BY name"))
                assert names.scalars().all() == [f"p-{OWN}", f"p-{OTHER}"], role
        finally:
            engine.dispose()
