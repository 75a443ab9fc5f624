"""The planner's profile rules (producer.assigning.profile_rules) and profile names: pure, no
database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.browser.profile_names import payload_profile_pool
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.store import PendingJob, ProfileRow
from scrapefleet.producer.assigning.planner import HostChoice, HostSlots, plan_assignments
from scrapefleet.producer.assigning.profile_rules import ProfilePlacement

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _hosts(*loads: tuple[str, int]) -> list[HostSlots]:
    """Hosts of capacity 6 with the given in-flight counts, all free slots usable."""
    return [HostSlots(name, 6, n, 6 - n) for name, n in loads]


def _job(job_id: int, *pool: str, last: str | None = None) -> PendingJob:
    return PendingJob(job_id, None, True, tuple(pool), last)


def _profile(
    name: str, host: str | None = None, cool_for_s: float | None = None, busy_on: str | None = None
) -> ProfileRow:
    until = None if cool_for_s is None else NOW + timedelta(seconds=cool_for_s)
    return ProfileRow(name, host, until, busy_on)


def _plan(
    hosts: list[HostSlots], jobs: list[PendingJob], *profiles: ProfileRow, now: datetime = NOW
) -> tuple[list[tuple[int, str]], dict[int, str]]:
    placement = ProfilePlacement({p.name: p for p in profiles}, now)
    plan = plan_assignments(hosts, jobs, set(), placement)
    return plan, placement.chosen


def test_a_bound_profile_runs_only_on_its_host_even_when_another_is_emptier() -> None:
    hosts = _hosts(("h1", 0), ("h2", 4))
    plan, chosen = _plan(hosts, [_job(1, "acct-7")], _profile("acct-7", "h2"))
    assert plan == [(1, "h2")] and chosen == {1: "acct-7"}


def test_a_profile_whose_host_has_no_slot_waits_and_holds_up_no_one() -> None:
    hosts = [HostSlots("h1", 6, 0, 6), HostSlots("h2", 6, 6, 0)]  # h2 full (or not active)
    jobs = [_job(1, "acct-7"), _job(2)]
    plan, chosen = _plan(hosts, jobs, _profile("acct-7", "h2"))
    assert plan == [(2, "h1")] and chosen == {}


def test_an_unbound_profile_goes_to_the_least_loaded_host() -> None:
    plan, chosen = _plan(_hosts(("h1", 3), ("h2", 1)), [_job(1, "new")])
    assert plan == [(1, "h2")] and chosen == {1: "new"}


def test_a_cooling_profile_gets_no_job_until_its_time_has_passed() -> None:
    hosts = _hosts(("h1", 0))
    cooling = _profile("acct-7", "h1", cool_for_s=60)
    assert _plan(hosts, [_job(1, "acct-7")], cooling) == ([], {})
    later = NOW + timedelta(seconds=61)
    assert _plan(hosts, [_job(1, "acct-7")], cooling, now=later)[0] == [(1, "h1")]


def test_two_jobs_of_one_profile_never_run_at_once() -> None:
    hosts = _hosts(("h1", 0), ("h2", 0))
    plan, _ = _plan(hosts, [_job(1, "acct-7"), _job(2, "acct-7")])
    assert plan == [(1, "h1")]  # the second waits for the first, in this plan
    busy = _profile("acct-7", "h1", busy_on="h1")  # and a job in flight holds it too
    assert _plan(hosts, [_job(3, "acct-7")], busy) == ([], {})


def test_a_pool_job_gets_a_profile_that_is_free_and_not_cooling() -> None:
    hosts = _hosts(("h1", 0), ("h2", 0))
    profiles = (
        _profile("a", "h1", cool_for_s=600),
        _profile("b", "h1", busy_on="h1"),
        _profile("c", "h2"),
    )
    plan, chosen = _plan(hosts, [_job(1, "a", "b", "c")], *profiles)
    assert plan == [(1, "h2")] and chosen == {1: "c"}


def test_jobs_of_one_pool_share_it_out_and_the_rest_wait() -> None:
    hosts = _hosts(("h1", 0), ("h2", 0))
    jobs = [_job(i, "a", "b") for i in (1, 2, 3)]
    plan, chosen = _plan(hosts, jobs, _profile("a", "h1"), _profile("b", "h2"))
    assert sorted(plan) == [(1, "h1"), (2, "h2")]
    assert chosen == {1: "a", 2: "b"}


def test_a_pool_job_sent_back_prefers_another_profile_than_its_last() -> None:
    hosts = _hosts(("h1", 0))
    plan, chosen = _plan(hosts, [_job(1, "a", "b", last="a")], _profile("a", "h1"))
    assert chosen == {1: "b"} and plan == [(1, "h1")]
    # ...but takes its last one again when no other is free
    plan, chosen = _plan(hosts, [_job(1, "a", "b", last="a")], _profile("b", busy_on="h1"))
    assert chosen == {1: "a"}


def test_a_bound_profile_is_preferred_on_the_host_picked_over_an_unbound_one() -> None:
    hosts = _hosts(("h1", 0), ("h2", 5))
    plan, chosen = _plan(hosts, [_job(1, "fresh", "old")], _profile("old", "h1"))
    assert plan == [(1, "h1")] and chosen == {1: "old"}


def test_a_host_to_avoid_is_avoided_only_while_another_can_take_the_job() -> None:
    class Avoid:
        def hosts_for(self, job: object) -> HostChoice:
            return HostChoice(avoid=frozenset({"h1"}))

        def placed(self, job: object, host: str) -> None:
            pass

    jobs = [_job(1)]
    assert plan_assignments(_hosts(("h1", 0), ("h2", 5)), jobs, set(), Avoid()) == [(1, "h2")]
    full = [HostSlots("h1", 6, 0, 6), HostSlots("h2", 6, 6, 0)]
    assert plan_assignments(full, jobs, set(), Avoid()) == [(1, "h1")]


def test_a_blocked_job_avoids_the_host_it_was_blocked_on_while_another_can_take_it() -> None:
    blocked = PendingJob(1, None, True, blocked_on_host="h1")
    pool_job = PendingJob(2, None, True, ("a", "b"), "a", blocked_on_host="h1")
    emptier_h1 = _hosts(("h1", 0), ("h2", 4))
    plan, chosen = _plan(emptier_h1, [blocked, pool_job])
    assert plan == [(1, "h2"), (2, "h2")] and chosen == {2: "b"}
    only_h1 = [HostSlots("h1", 6, 0, 6), HostSlots("h2", 6, 6, 0)]
    assert _plan(only_h1, [blocked])[0] == [(1, "h1")]  # better there than nowhere
    # A profile bound to the host that blocked it can only run there (it cools down instead).
    bound = PendingJob(3, None, True, ("c",), "c", blocked_on_host="h1")
    assert _plan(emptier_h1, [bound], _profile("c", "h1"))[0] == [(3, "h1")]


def test_a_job_whose_ended_attempt_may_still_run_on_a_host_goes_elsewhere_if_it_can() -> None:
    lingering = PendingJob(1, None, False, lingering_on_host="h1")
    assert _plan(_hosts(("h1", 0), ("h2", 4)), [lingering])[0] == [(1, "h2")]
    only_h1 = [HostSlots("h1", 6, 0, 6), HostSlots("h2", 6, 6, 0)]
    assert _plan(only_h1, [lingering])[0] == [(1, "h1")]  # it waits there for the thread


def test_the_rules_need_an_aware_clock() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ProfilePlacement({}, datetime(2026, 11, 24))


# ---------------------------------------------------------------- names, at submit


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("../x", "'../x' is not a profile name"),
        (".hidden", "is not a profile name"),
        ("a/b", "is not a profile name"),
        ("x" * 65, "is not a profile name"),
        ([], "non-empty list"),
        (["a", "a"], "named twice"),
        (["a", "../b"], "'../b' is not a profile name"),
        (7, "must be a profile name"),
    ],
)
def test_a_bad_profile_is_refused_with_the_field_named(value: object, message: str) -> None:
    payload = {"url": "http://127.0.0.1/", "browser": {"profile": value}}
    with pytest.raises(SubmitError, match=r"payload\.browser\.profile: ") as refused:
        get_action("fetch_page").validate(payload)
    assert message in str(refused.value)


def test_a_profile_or_pool_is_the_jobs_pool() -> None:
    action = get_action("fetch_page")
    for choice, pool in (("acct-7", ["acct-7"]), (["a.1", "b_2"], ["a.1", "b_2"])):
        payload = {"url": "http://127.0.0.1/", "browser": {"profile": choice}}
        action.validate(payload)
        assert payload_profile_pool(payload) == pool
    assert payload_profile_pool({"url": "http://127.0.0.1/"}) is None
