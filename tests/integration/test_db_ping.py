"""A pooled connection is pinged at checkout only after it sat idle; a dead one found so is
replaced without the caller seeing an error, and one that dies in use fails its statement
once, after which the pool connects afresh (real PostgreSQL; the backend is ended with
pg_terminate_backend)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.db.engines import sqlalchemy_url
from scrapefleet.common.db.ping import ping_after_idle
from tests.integration.backends import Clock, terminate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pinged(database_url: str, clock: Clock) -> Iterator[Engine]:
    """An engine of one connection, pinged after 1 s idle on ``clock``."""
    engine = sa.create_engine(sqlalchemy_url(database_url), pool_size=1)
    ping_after_idle(engine, idle_s=1.0, clock=clock)
    yield engine
    engine.dispose()


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def count_pings(engine: Engine) -> list[int]:
    """The dialect's pings through ``engine`` from now on, counted in the list's one item."""
    pings = [0]
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        pings[0] += 1
        return ping(dbapi_connection)

    engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return pings


def test_a_connection_is_pinged_only_after_it_sat_idle(pinged: Engine, clock: Clock) -> None:
    pings = count_pings(pinged)
    pid = backend_pid(pinged)  # a new connection: not pinged
    clock.now += 0.5
    assert backend_pid(pinged) == pid and pings == [0]  # used a moment ago
    clock.now += 5
    assert backend_pid(pinged) == pid and pings == [1]  # idle for 5 s: pinged, alive


def test_a_connection_that_died_while_idle_is_replaced_at_checkout(
    pinged: Engine, clock: Clock, engine: Engine
) -> None:
    dead = backend_pid(pinged)
    terminate(engine, dead)
    clock.now += 5
    assert backend_pid(pinged) != dead  # no error: the ping found it and the pool replaced it


def test_a_connection_that_died_within_the_idle_time_fails_once_then_the_pool_reconnects(
    pinged: Engine, engine: Engine
) -> None:
    dead = backend_pid(pinged)
    terminate(engine, dead)
    with pytest.raises(sa.exc.OperationalError), pinged.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    assert backend_pid(pinged) != dead
