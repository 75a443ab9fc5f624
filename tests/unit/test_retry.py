"""common.actions.retry: exponential backoff with bounded jitter, capped, and an end."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.actions.retry import backoff_delay_s, retry_at

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def test_delays_double_without_jitter() -> None:
    delays = [backoff_delay_s(a, base_s=5, max_s=1000, jitter=0) for a in range(1, 6)]
    assert delays == [5, 10, 20, 40, 80]


def test_delay_is_capped() -> None:
    assert backoff_delay_s(30, base_s=5, max_s=600, jitter=0) == 600
    assert backoff_delay_s(10_000, base_s=5, max_s=600, jitter=0.2) <= 600


@pytest.mark.parametrize("attempt", [1, 2, 3, 7])
def test_jitter_stays_within_bounds(attempt: int) -> None:
    rng = random.Random(1234)
    exact = 2.0 * 2 ** (attempt - 1)
    delays = [
        backoff_delay_s(attempt, base_s=2, max_s=10_000, jitter=0.2, rng=rng) for _ in range(500)
    ]
    assert all(exact * 0.8 <= d <= exact * 1.2 for d in delays)
    assert len(set(delays)) > 400  # actually spread, not one value


def test_retry_at_is_now_plus_delay() -> None:
    rng = random.Random(7)
    when = retry_at(2, 5, NOW, base_s=10, max_s=1000, rng=rng)
    assert when is not None
    assert timedelta(seconds=16) <= when - NOW <= timedelta(seconds=24)
    assert when.tzinfo is not None


def test_exhausted_attempts_give_none() -> None:
    assert retry_at(3, 3, NOW) is None
    assert retry_at(4, 3, NOW) is None
    assert retry_at(1, 1, NOW) is None


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError):
        backoff_delay_s(0)
