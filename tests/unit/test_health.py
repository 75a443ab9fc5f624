"""Host state after a probe: a pure decision."""

from __future__ import annotations

import pytest

from scrapefleet.producer.health import next_host_state

THRESHOLD = 3


@pytest.mark.parametrize("failures", [1, 2])
def test_fewer_failures_than_the_threshold_change_nothing(failures: int) -> None:
    assert next_host_state("active", False, failures, None, THRESHOLD) == "active"


@pytest.mark.parametrize("failures", [3, 4, 10])
def test_threshold_failures_make_a_host_offline(failures: int) -> None:
    assert next_host_state("active", False, failures, None, THRESHOLD) == "offline"


@pytest.mark.parametrize("state", ["restarting", "rebooting"])
def test_a_stack_or_reboot_that_never_returns_goes_offline(state: str) -> None:
    assert next_host_state(state, False, 3, None, THRESHOLD) == "offline"


def test_offline_stays_offline_while_failing() -> None:
    assert next_host_state("offline", False, 7, None, THRESHOLD) == "offline"


def test_success_brings_an_offline_host_back() -> None:
    assert next_host_state("offline", True, 0, "active", THRESHOLD) == "active"


def test_an_offline_host_still_restarting_stays_offline() -> None:
    assert next_host_state("offline", True, 0, "restarting", THRESHOLD) == "offline"


@pytest.mark.parametrize("state", ["draining", "disabled"])
@pytest.mark.parametrize("probe_ok", [True, False])
def test_operator_states_are_left_alone(state: str, probe_ok: bool) -> None:
    failures = 0 if probe_ok else 99
    reported = "active" if probe_ok else None
    assert next_host_state(state, probe_ok, failures, reported, THRESHOLD) == state


@pytest.mark.parametrize("state", ["active", "restarting", "rebooting"])
def test_success_leaves_consumer_managed_states(state: str) -> None:
    assert next_host_state(state, True, 0, "active", THRESHOLD) == state
