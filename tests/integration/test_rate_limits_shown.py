"""Rate limits as an operator sees them, against real PostgreSQL: `scrapefleet rate-limits` (the
rate_limits view, the held keys first) and the producer's per-key metrics."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.jobs.rate_limits import RateLimit, Slowdown
from scrapefleet.common.store import NewJob
from scrapefleet.producer.background.fleet_metrics import read_fleet_snapshot
from tests.cli_helpers import run_cli
from tests.integration.producer_helpers import exported_samples, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _three_keys(engine: Engine) -> None:
    """pushy.test paused and slowed, calm.test under a named limit, free.test held to nothing."""
    submit(engine, [NewJob("noop", rate_key="pushy.test") for _ in range(5)])
    submit(engine, [NewJob("noop", rate_key="calm.test") for _ in range(2)])
    submit(engine, [NewJob("noop", rate_key="free.test") for _ in range(9)])
    with engine.begin() as conn:
        store.save_rate_keys(
            conn,
            {"calm.test": RateLimit(concurrency=1)},
            None,
            {"pushy.test": Slowdown(0.25, utcnow() + timedelta(minutes=5))},
            utcnow(),
        )


def test_rate_limits_lists_the_held_keys_paused_first(engine: Engine, database_url: str) -> None:
    _three_keys(engine)
    shown = run_cli(["rate-limits"], database_url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("key") and "held back by" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["pushy.test", "calm.test"]
    assert "paused" in lines[1] and "Retry-After" in lines[1]

    every = run_cli(["rate-limits", "--all", "--json"], database_url)
    rows = {row["key"]: row for row in map(json.loads, every.stdout.splitlines())}
    assert set(rows) == {"pushy.test", "calm.test", "free.test"}
    assert rows["free.test"]["pending"] == 9 and rows["free.test"]["concurrency_limit"] is None
    assert rows["pushy.test"]["factor"] == 0.25 and rows["pushy.test"]["paused_until"]


def test_rate_limits_says_so_when_no_key_is_held(engine: Engine, database_url: str) -> None:
    submit(engine, [NewJob("noop", rate_key="free.test")])
    shown = run_cli(["rate-limits"], database_url)
    assert shown.returncode == 0 and shown.stdout == "no rate key is limited, slowed or paused\n"


def test_the_producer_exports_the_held_keys(engine: Engine) -> None:
    _three_keys(engine)
    snapshot = read_fleet_snapshot(engine)
    assert set(snapshot.rate_keys) == {"pushy.test", "calm.test"}
    samples = exported_samples(snapshot, "scrapefleet_rate_key_", "key")
    assert samples[("scrapefleet_rate_key_paused", "pushy.test")] == 1.0
    assert samples[("scrapefleet_rate_key_factor", "pushy.test")] == 0.25
    assert samples[("scrapefleet_rate_key_paused", "calm.test")] == 0.0
    assert samples[("scrapefleet_rate_key_pending", "calm.test")] == 2.0
    assert not any(key == "free.test" for _, key in samples)
