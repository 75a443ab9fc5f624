"""Rate limits under the roles by duty: the producer's role keeps rate_keys, the reporting role
reads the rate_limits view, and a consumer's role can neither read nor write either."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.jobs.rate_limits import RateLimit, Slowdown
from scrapefleet.common.store import NewJob
from tests.integration import test_db_roles as roles
from tests.integration.test_db_roles import OWN, Fleet, refused

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

# The roles module's database, roles and engines (a module of their own here).
fleet, admin, own = roles.fleet, roles.admin, roles.own


def test_only_the_producer_keeps_the_rate_keys_and_no_consumer_sees_them(
    fleet: Fleet, admin: Engine, own: Engine
) -> None:
    producer = make_engine(fleet.url(fleet.names.producer), pool_size=1)
    reporting = make_engine(fleet.url(fleet.names.reporting), pool_size=1)
    try:
        with producer.begin() as conn:
            conn.execute(sa.text("DELETE FROM rate_keys"))
            store.insert_jobs(
                conn, [NewJob("http_get", {"url": "https://shop.test/"})], default_max_attempts=3
            )
            store.save_rate_keys(conn, {"shop.test": RateLimit(concurrency=2)}, None, {}, utcnow())
            store.save_rate_keys(
                conn,
                {"shop.test": RateLimit(concurrency=2)},
                None,
                {"x.test": Slowdown(0.5)},
                utcnow(),
            )
        with reporting.connect() as conn:
            view = conn.execute(
                sa.text("SELECT key, pending, concurrency_limit, factor FROM rate_limits")
            ).all()
        assert [tuple(r) for r in view] == [("shop.test", 1, 2, 1.0), ("x.test", 0, None, 0.5)]
        assert "permission denied" in refused(reporting, "DELETE FROM rate_keys")
        assert "permission denied" in refused(own, "SELECT * FROM rate_keys")
        assert "permission denied" in refused(own, "SELECT * FROM rate_limits")
        assert "permission denied" in refused(
            own, f"UPDATE rate_keys SET paused_until = NULL WHERE key = '{OWN}'"
        )
    finally:
        producer.dispose()
        reporting.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text("DELETE FROM rate_keys"))
            conn.execute(sa.text("DELETE FROM jobs"))


def test_only_the_producer_changes_live_controls_and_no_consumer_sees_them(
    fleet: Fleet, admin: Engine, own: Engine
) -> None:
    producer = make_engine(fleet.url(fleet.names.producer), pool_size=1)
    reporting = make_engine(fleet.url(fleet.names.reporting), pool_size=1)
    try:
        with producer.begin() as conn:
            assert store.change_control(
                conn, store.Scope.RATE_KEY, "shop.test", store.ControlChange.PAUSE, "cli", "x"
            )
        with reporting.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM control_changes")).scalar_one() == 1
        assert "permission denied" in refused(reporting, "DELETE FROM live_controls")
        for table in ("live_controls", "control_changes"):
            assert "permission denied" in refused(own, f"SELECT * FROM {table}")
        assert "permission denied" in refused(
            own, "DELETE FROM live_controls WHERE name = 'shop.test'"
        )
    finally:
        producer.dispose()
        reporting.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text("DELETE FROM live_controls"))
            conn.execute(sa.text("DELETE FROM control_changes"))
