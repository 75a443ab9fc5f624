"""The restart/reboot policy: pure functions of counters."""

from __future__ import annotations

import pytest

from scrapefleet.consumer.browser.supervisor.maintenance_policy import (
    claims_allowed,
    decide_maintenance,
    maintenance_due,
    retry_delay_s,
)


@pytest.mark.parametrize(
    ("since_restart", "since_boot", "expected"),
    [
        (0, 0, "none"),
        (19, 19, "none"),
        (20, 20, "restart"),
        (20, 80, "reboot"),  # the reboot restarts the stack too, so it wins
        (0, 80, "reboot"),
        (25, 40, "restart"),  # overshoot (a crash between claim and restart) still restarts
    ],
)
def test_decide_maintenance(since_restart: int, since_boot: int, expected: str) -> None:
    assert decide_maintenance(since_restart, since_boot, 20, 80) == expected


def test_zero_disables_each_maintenance() -> None:
    assert decide_maintenance(500, 500, 0, 0) == "none"
    assert decide_maintenance(500, 500, 20, 0) == "restart"
    assert decide_maintenance(500, 500, 0, 80) == "reboot"


@pytest.mark.parametrize(
    ("since_restart", "since_boot", "in_flight", "expected"),
    [
        (0, 0, 0, 6),  # fresh stack: every slot
        (0, 0, 4, 2),  # free slots only
        (17, 17, 0, 3),  # the restart budget caps it
        (20, 20, 3, 0),  # budget spent: claim nothing more
        (0, 78, 0, 2),  # the reboot budget caps it
        (0, 0, 9, 0),  # more in flight than capacity never goes negative
    ],
)
def test_claims_allowed(since_restart: int, since_boot: int, in_flight: int, expected: int) -> None:
    assert claims_allowed(since_restart, since_boot, 20, 80, 6, in_flight) == expected


def test_claims_allowed_ignores_disabled_budgets() -> None:
    assert claims_allowed(1000, 1000, 0, 0, 6, 1) == 5


def test_exactly_restart_every_jobs_run_per_stack_lifetime() -> None:
    """Simulate a claim loop: jobs claimed in batches, finishing one at a time."""
    since_restart = since_boot = in_flight = 0
    per_lifetime: list[int] = []
    claimed_this_life = 0
    for _ in range(1000):
        batch = claims_allowed(since_restart, since_boot, 20, 0, 6, in_flight)
        since_restart += batch
        since_boot += batch
        in_flight += batch
        claimed_this_life += batch
        if in_flight:
            in_flight -= 1
        elif maintenance_due(since_restart, since_boot, 20, 0, in_flight) == "restart":
            per_lifetime.append(claimed_this_life)
            since_restart = claimed_this_life = 0
        if len(per_lifetime) == 5:
            break
    assert per_lifetime == [20] * 5


def test_no_maintenance_while_jobs_are_in_flight() -> None:
    assert maintenance_due(20, 20, 20, 80, in_flight=1) == "none"
    assert maintenance_due(20, 20, 20, 80, in_flight=0) == "restart"


def test_a_failing_stack_waits_longer_after_each_failure_up_to_the_cap() -> None:
    assert [retry_delay_s(n, 60.0, 1800.0) for n in range(1, 8)] == [
        60.0, 120.0, 240.0, 480.0, 960.0, 1800.0, 1800.0,
    ]  # fmt: skip
    assert retry_delay_s(0, 60.0, 1800.0) == 60.0  # never shorter than the base
