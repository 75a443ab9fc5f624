"""The pure decisions behind "producer up / down since ...": staleness, who leads, what to say."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.ops.render import render_delivery
from scrapefleet.common.reads.producer_status import (
    NO_SECRET,
    ProducerRow,
    delivery_state,
    is_fresh,
    stale_after_s,
    summarize,
)
from scrapefleet.common.reads.queries import FleetControl

pytestmark = pytest.mark.timeout(10)

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


def row(
    name: str, role: str = "leader", *, cycle_age_s: float | None = 1.0, **kw: object
) -> ProducerRow:
    values: dict[str, object] = {
        "name": name,
        "host": "p1",
        "pid": 100,
        "version": "0.1.0",
        "role": role,
        "interval_s": 2.0,
        "webhook_secret_set": True,
        "started_at": NOW - timedelta(hours=1),
        "last_seen_at": NOW - timedelta(seconds=cycle_age_s or 1.0),
        "last_cycle_at": None if cycle_age_s is None else NOW - timedelta(seconds=cycle_age_s),
        "last_cycle_duration_s": 0.012,
    }
    return ProducerRow(**(values | kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("interval_s", "expected"), [(0.3, 10.0), (2.0, 10.0), (3.4, 10.2), (10.0, 30.0)]
)
def test_stale_after_is_three_intervals_with_a_ten_second_floor(
    interval_s: float, expected: float
) -> None:
    assert stale_after_s(interval_s) == pytest.approx(expected)


def test_fresh_up_to_the_bound_and_never_seen_is_not() -> None:
    assert is_fresh(NOW - timedelta(seconds=10), NOW, 2.0)
    assert not is_fresh(NOW - timedelta(seconds=10.001), NOW, 2.0)
    assert is_fresh(NOW - timedelta(seconds=29), NOW, 10.0)  # judged by its own interval
    assert not is_fresh(None, NOW, 2.0)


def test_no_producer_ever_is_down() -> None:
    status = summarize([], NOW)
    assert not status.up and status.leader is None and status.down_since is None
    assert "no producer has ever run" in status.headline()
    assert status.to_json()["up"] is False and status.to_json()["leader"] is None
    assert status.webhook_secret_set is None  # nobody to ask


def test_a_fresh_leader_is_up_and_its_standby_listed() -> None:
    leader = row("p1:100", cycle_age_s=1.5)
    standby = row("p2:200", "standby", cycle_age_s=None, last_seen_at=NOW - timedelta(seconds=1))
    status = summarize([standby, leader], NOW)
    assert status.up and status.leader == leader and status.down_since is None
    assert "producer up: leader p1:100" in status.headline()
    assert "last cycle 1.5 s ago, took 12 ms" in status.headline()
    document = status.to_json()
    assert document["standbys"][0]["name"] == "p2:200" and document["standbys"][0]["up"]
    assert document["last_cycle_at"] == leader.last_cycle_at
    assert any("standby p2:200" in line and line.endswith(": up") for line in status.lines())


def test_a_stale_leader_is_down_since_its_last_cycle() -> None:
    leader = row("p1:100", cycle_age_s=30.0)
    status = summarize([leader], NOW)
    assert not status.up and status.down_since == leader.last_cycle_at
    assert status.headline().startswith("producer down since 2026-11-24 11:59:30 UTC")
    assert "no cycle for 30 s" in status.headline()


def test_a_stopped_leader_is_down_at_once() -> None:
    status = summarize([row("p1:100", "stopped", cycle_age_s=0.5)], NOW)
    assert not status.up and "(stopped; last leader p1:100)" in status.headline()


def test_the_leader_is_the_one_that_cycled_last() -> None:
    """A killed leader keeps role 'leader'; its successor's newer cycle makes it the leader."""
    dead = row("p1:100", cycle_age_s=60.0)
    successor = row("p2:200", cycle_age_s=0.5)
    status = summarize([dead, successor], NOW)
    assert status.up and status.leader == successor
    assert status.standbys == ()


def test_a_standby_that_went_silent_is_listed_as_down() -> None:
    gone = row("p2:200", "standby", cycle_age_s=None, last_seen_at=NOW - timedelta(minutes=5))
    status = summarize([row("p1:100"), gone], NOW)
    assert [s.up for s in status.standbys] == [False]
    assert any("standby p2:200" in line and "down since" in line for line in status.lines())


def test_pause_and_blocked_webhooks_are_said() -> None:
    control = FleetControl(True, "cli", NOW - timedelta(minutes=1), "db maintenance")
    leader = replace(row("p1:100"), webhook_secret_set=False)
    status = summarize([leader], NOW, control, unsent_webhooks=4)
    assert status.paused and status.to_json()["pause_reason"] == "db maintenance"
    assert status.webhooks_blocked
    lines = status.lines()
    assert any(line.startswith("assignment paused by cli") for line in lines)
    assert f"webhooks: 4 deliveries waiting, {NO_SECRET}" in lines
    # With a secret, or with nothing waiting, nothing is said about webhooks.
    assert not summarize([row("p1:100")], NOW, control, unsent_webhooks=4).webhooks_blocked
    assert not summarize([leader], NOW, control, unsent_webhooks=0).webhooks_blocked


def _delivery(**kw: object) -> dict[str, object]:
    values: dict[str, object] = {
        "status": "completed",
        "url": "https://hooks.example/x",
        "attempts": 0,
        "next_attempt_at": NOW - timedelta(hours=2),
        "delivered_at": None,
        "gave_up_at": None,
        "last_error": None,
        "response_code": None,
    }
    return values | kw


def test_a_waiting_delivery_without_a_secret_says_why_not_attempts() -> None:
    waiting = _delivery()
    assert delivery_state(waiting, False) == NO_SECRET
    assert render_delivery(waiting, False) == NO_SECRET
    # A producer with a secret, or none known: the attempts tell the truth.
    assert delivery_state(waiting, True) is None
    assert render_delivery(waiting, True) == "attempts 0, next attempt 2026-11-24 10:00:00"
    assert delivery_state(waiting, None) is None


def test_finished_deliveries_keep_their_outcome_whatever_the_secret() -> None:
    delivered = _delivery(attempts=1, delivered_at=NOW, response_code=204, next_attempt_at=None)
    assert delivery_state(delivered, False) is None
    assert render_delivery(delivered, False) == "delivered 2026-11-24 12:00:00 (HTTP 204)"
    gave_up = _delivery(attempts=10, gave_up_at=NOW, last_error="HTTP 500", response_code=500)
    assert render_delivery(gave_up, False).startswith("gave up 2026-11-24 12:00:00 after 10")
