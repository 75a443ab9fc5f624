"""Why a job waits for its kind (common.reads.kind_waits.wait_reason), a pure function."""

from __future__ import annotations

from scrapefleet.common.reads.kind_waits import HostKinds, wait_reason

RUNS_PRICES = frozenset({"noop", "prices"})
NOOP_ONLY = frozenset({"noop"})


def test_an_active_host_that_runs_the_kind_means_no_wait() -> None:
    hosts = [HostKinds("s1", "active", RUNS_PRICES), HostKinds("s2", "active", NOOP_ONLY)]
    assert wait_reason("prices", hosts) is None


def test_the_only_host_of_a_kind_drained_names_it() -> None:
    hosts = [HostKinds("s1", "active", NOOP_ONLY), HostKinds("scraper-2", "draining", RUNS_PRICES)]
    assert wait_reason("prices", hosts) == (
        "waiting: no active host runs kind 'prices' (scraper-2 is draining)"
    )


def test_a_kind_no_host_runs() -> None:
    assert wait_reason("prices", [HostKinds("s1", "active", NOOP_ONLY)]) == (
        "waiting: no host runs kind 'prices'"
    )


def test_hosts_that_do_not_say_run_any_kind() -> None:
    assert wait_reason("prices", [HostKinds("old", "active", None)]) is None
    assert wait_reason("prices", [HostKinds("old", "offline", None)]) is None  # nothing known
    hosts = [HostKinds("old", "active", None), HostKinds("s1", "active", NOOP_ONLY)]
    assert wait_reason("prices", hosts) is None


def test_many_hosts_are_named_a_few_at_a_time() -> None:
    hosts = [HostKinds(f"s{i}", "offline", RUNS_PRICES) for i in range(5)]
    assert wait_reason("prices", hosts) == (
        "waiting: no active host runs kind 'prices'"
        " (s0 is offline, s1 is offline, s2 is offline and 2 more)"
    )
