"""Live controls against real PostgreSQL, through the real CLI and the producer's own cycles:
one rate key, kind or crawl paused or limited without a restart, the next cycle honouring it
while the other keys go on, and every change in control_changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import NewJob
from tests.cli_helpers import run_cli
from tests.integration.producer_helpers import add_hosts, publish_status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _in_flight_by(engine: Engine, column: str) -> dict[Any, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT {column}, count(*) FROM jobs"
                " WHERE status IN ('queued', 'processing') GROUP BY 1"
            )
        ).all()
    return {r[0]: r[1] for r in rows}


def _finish_all(engine: Engine, host: str) -> None:
    with engine.begin() as conn:
        claimed = store.claim_jobs(conn, host, 100).jobs
        store.complete_jobs(conn, host, [(j.id, j.attempt, {}) for j in claimed])


def _cli(database_url: str, *args: str) -> Any:
    return run_cli(["controls", *args], database_url)


@pytest.fixture
def fleet(engine: Engine, tmp_path: Path) -> None:
    add_hosts(engine, {"h1": 6})
    publish_status(tmp_path, "h1")


def test_a_paused_key_waits_while_the_others_go_on_and_comes_back_on_resume(
    engine: Engine, database_url: str, fleet: None, make_producer: Any
) -> None:
    submit(engine, [NewJob("noop", rate_key="a.test") for _ in range(20)])
    submit(engine, [NewJob("noop", rate_key="b.test") for _ in range(20)])
    producer = make_producer()

    paused = _cli(database_url, "pause", "--key", "a.test", "--reason", "they asked")
    assert paused.returncode == 0, paused.stderr
    assert producer.run_cycle().assigned == 6
    assert _in_flight_by(engine, "rate_key") == {"b.test": 6}  # a.test's older jobs wait

    again = _cli(database_url, "pause", "--key", "a.test")
    assert again.returncode == 1 and "nothing changed" in again.stderr

    assert _cli(database_url, "resume", "--key", "a.test").returncode == 0
    _finish_all(engine, "h1")
    assert producer.run_cycle().assigned == 6
    assert _in_flight_by(engine, "rate_key") == {"a.test": 6}  # the oldest first again

    with engine.connect() as conn:
        changes = conn.execute(
            sa.text(
                "SELECT change, scope, name, changed_by, reason FROM control_changes ORDER BY id"
            )
        ).all()
        left = conn.execute(sa.text("SELECT count(*) FROM live_controls")).scalar_one()
    assert [(c.change, c.scope, c.name, c.reason) for c in changes] == [
        ("pause", "rate_key", "a.test", "they asked"),
        ("resume", "rate_key", "a.test", None),
    ]
    assert all(c.changed_by.startswith("cli") for c in changes)
    assert left == 0  # a control that holds nothing is no row


def test_a_live_limit_replaces_the_configured_one_until_cleared(
    engine: Engine, database_url: str, fleet: None, make_producer: Any
) -> None:
    submit(engine, [NewJob("noop", rate_key="a.test") for _ in range(30)])
    producer = make_producer(rate_limits={"a.test": {"concurrency": 5}})
    limited = _cli(database_url, "limit", "--key", "a.test", "--concurrency", "2")
    assert limited.returncode == 0, limited.stderr
    assert producer.run_cycle().assigned == 2
    assert _cli(database_url, "unlimit", "--key", "a.test").returncode == 0
    assert producer.run_cycle().assigned == 3  # the settings file's 5 again
    listed = _cli(database_url, "list")
    assert "nothing paused or limited live" in listed.stdout


def test_a_paused_kind_and_a_paused_crawl_wait(
    engine: Engine, database_url: str, fleet: None, make_producer: Any
) -> None:
    submit(engine, [NewJob("prices") for _ in range(3)])
    with engine.begin() as conn:
        crawl = store.start_crawl(
            conn, kind="crawl", payload={"url": "http://127.0.0.1:9/"}, max_depth=1, max_jobs=10
        )
    submit(engine, [NewJob("noop") for _ in range(2)])
    assert _cli(database_url, "pause", "--kind", "prices").returncode == 0
    assert _cli(database_url, "pause", "--crawl", str(crawl)).returncode == 0
    assert make_producer().run_cycle().assigned == 2
    assert _in_flight_by(engine, "kind") == {"noop": 2}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["pause"], "name exactly one of --key, --kind or --crawl"),
        (["pause", "--key", "a", "--kind", "b"], "name exactly one of --key, --kind or --crawl"),
        (["limit", "--crawl", "4"], "a crawl can be paused, not limited"),
        (["limit", "--key", "a.test"], "give --concurrency, --per-minute or both"),
        (["pause", "--key", "k" * 201], "--key"),
        (["limit", "--key", "a.test", "--concurrency", "0"], "--concurrency"),
    ],
)
def test_bad_controls_are_refused_naming_the_option(
    engine: Engine, database_url: str, args: list[str], says: str
) -> None:
    done = _cli(database_url, *args)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM control_changes")).scalar_one() == 0
