"""Proxy pools under the roles by duty, with the real roles `scrapefleet db grant` makes: a
consumer's role reads the credentials of the proxy its own processing attempt leased and
nothing else of the pools, charges only that proxy, and the reporting role (the dashboard's)
never reads a password."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.identities.proxy_pools import LeaseOutcome, parse_proxy
from scrapefleet.common.store import NewJob
from tests.integration import test_db_roles as roles
from tests.integration.test_db_roles import OTHER, OWN, Fleet, refused

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

fleet, admin, own = roles.fleet, roles.admin, roles.own
SECRET = "pool-pw-4411"


def _leased_jobs(admin: Engine) -> dict[str, tuple[int, int]]:
    """One job on each host, leased a proxy of its own (the producer's lease, by hand), and
    claimed: host -> (job id, claim)."""
    jobs = {}
    with admin.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE proxy_pools, proxies, proxy_credentials, identity_leases,"
                " proxy_sessions, proxy_session_jars"
            )
        )
        entries = [parse_proxy(f"http://u{n}:{SECRET}@127.0.0.{n}:8080") for n in (2, 3)]
        store.add_proxies(conn, "res", entries)
        ids = dict(conn.execute(sa.text("SELECT url, id FROM proxies")).all())
        for host, entry in zip((OWN, OTHER), entries, strict=True):
            job = NewJob(
                "http_get",
                {"url": "http://a.test/", "session": f"s-{host}"},
                proxy_pool="res",
                proxy_session=f"s-{host}",
            )
            (job_id,) = store.insert_jobs(conn, [job], default_max_attempts=3).ids
            store.assign_jobs(conn, [(job_id, host)])
            store.lease_identities(conn, [(job_id, ids[entry.url], None)])
            (claimed,) = store.claim_jobs(conn, host, 6).jobs
            jobs[host] = (job_id, claimed.claim)
    return jobs


def test_a_consumer_reads_and_charges_only_its_own_attempts_proxy(
    admin: Engine, own: Engine
) -> None:
    jobs = _leased_jobs(admin)
    with own.begin() as conn:
        mine = store.proxy_for_attempt(conn, *jobs[OWN])
        assert mine is not None and mine.url == f"http://u2:{SECRET}@127.0.0.2:8080"
        assert store.proxy_for_attempt(conn, jobs[OWN][0], jobs[OWN][1] + 1) is None  # old claim
        assert store.proxy_for_attempt(conn, *jobs[OTHER]) is None
        assert store.charge_identity(conn, *jobs[OTHER], LeaseOutcome.BLOCKED) is None
        assert store.charge_identity(conn, *jobs[OWN], LeaseOutcome.BLOCKED) == "cooling"
    for table in ("proxy_credentials", "proxies", "proxy_pools", "identity_leases"):
        assert "permission denied" in refused(own, f"SELECT * FROM {table}"), table
    assert "permission denied" in refused(own, "UPDATE proxies SET state = 'ready'")
    with admin.connect() as conn:
        blocks = dict(conn.execute(sa.text("SELECT url, blocks FROM proxies")).all())
    assert blocks == {"http://127.0.0.2:8080": 1, "http://127.0.0.3:8080": 0}


def test_the_reporting_role_sees_the_pools_but_no_password(fleet: Fleet, admin: Engine) -> None:
    _leased_jobs(admin)
    engine = make_engine(fleet.url(fleet.names.reporting), pool_size=1)
    try:
        with engine.connect() as conn:
            shown = conn.execute(sa.text("SELECT identity FROM identity_health")).scalars().all()
            assert sorted(shown) == ["http://***@127.0.0.2:8080", "http://***@127.0.0.3:8080"]
            assert store.proxy_for_attempt(conn, 1, 1) is None  # not a host's, nor the producer
        assert "permission denied" in refused(engine, "SELECT * FROM proxy_credentials")
        assert "permission denied" in refused(engine, "SELECT * FROM proxy_session_jars")
    finally:
        engine.dispose()


def test_a_consumer_keeps_and_reads_only_its_own_attempts_session_jar(
    admin: Engine, own: Engine
) -> None:
    jobs = _leased_jobs(admin)
    jar = [{"name": "visitor", "value": "v1", "domain": "a.test", "path": "/"}]
    with own.begin() as conn:
        fresh = store.session_for_attempt(conn, *jobs[OWN])
        assert fresh is not None and fresh.cookies is None  # a session with no jar yet
        assert store.keep_session(conn, *jobs[OWN], jar, "agent/1")
        assert not store.keep_session(conn, *jobs[OTHER], jar, "agent/1")
        assert store.session_for_attempt(conn, *jobs[OTHER]) is None
        again = store.session_for_attempt(conn, *jobs[OWN])
        assert again is not None and again.cookies == jar and again.user_agent == "agent/1"
    assert "permission denied" in refused(own, "SELECT * FROM proxy_session_jars")
    with admin.connect() as conn:
        kept = conn.execute(sa.text("SELECT key FROM proxy_session_jars")).scalars().all()
    assert kept == [f"s-{OWN}"]
