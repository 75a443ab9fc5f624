"""The SSH reconnect schedule (pure function, no I/O)."""

import pytest

from scrapefleet.producer.probes.ssh_probe import RECONNECT_MAX_S, reconnect_delay_s


def test_first_failure_retries_at_the_next_round() -> None:
    assert reconnect_delay_s(0) == 0.0
    assert reconnect_delay_s(1) == 0.0


def test_delay_doubles_from_the_base() -> None:
    assert [reconnect_delay_s(n, base_s=1.0, max_s=100.0) for n in range(2, 7)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
    ]


def test_delay_is_capped() -> None:
    assert reconnect_delay_s(10, base_s=1.0, max_s=30.0) == 30.0
    assert reconnect_delay_s(10_000) == RECONNECT_MAX_S  # no overflow for long outages


@pytest.mark.parametrize("failures", range(0, 40))
def test_delay_never_decreases(failures: int) -> None:
    assert reconnect_delay_s(failures + 1) >= reconnect_delay_s(failures)
