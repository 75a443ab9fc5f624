"""Rate limits as pure functions: the budget per key and kind, what the pending read leaves out,
the planner's admission, the back-off, and the settings' validation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.constants import RATE_FACTOR_MIN, RATE_TIGHT_MAX
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.jobs.rate_limits import (
    RateCount,
    RateLimit,
    Slowdown,
    ThrottleSeen,
    capped_pause,
    next_slowdown,
)
from scrapefleet.common.settings import load_settings
from scrapefleet.producer.assigning.planner import HostSlots, plan_assignments
from scrapefleet.producer.assigning.rate_budget import RateBudget, RateRules
from scrapefleet.producer.assigning.rate_steps import next_paced_start

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
DAY = 86400.0
TWO_AT_ONCE = RateLimit(concurrency=2, per_minute=60)


@dataclass(frozen=True)
class Job:
    id: int
    rate_key: str | None
    kind: str = "noop"
    lock_key: str | None = None
    needs_browser: bool = False


def _count(key: str | None, in_flight: int = 0, window: int = 0) -> RateCount:
    return RateCount(key, "noop", in_flight, window)


def _budget(
    rules: RateRules, *counts: RateCount, slowdowns: dict[str, Slowdown] | None = None
) -> RateBudget:
    return RateBudget(rules, list(counts), slowdowns or {}, NOW)


# ---------------------------------------------------------------- the budget


def test_concurrency_counts_queued_and_running_jobs() -> None:
    budget = _budget(RateRules(keys={"a.test": TWO_AT_ONCE}), _count("a.test", in_flight=1))
    assert budget.key_left("a.test") == 1
    assert budget.key_left("other.test") is None  # no limit, no default
    assert budget.key_left(None) is None


def test_per_minute_counts_the_windows_use() -> None:
    rules = RateRules(keys={"a.test": RateLimit(per_minute=10)})
    assert _budget(rules, _count("a.test", in_flight=1, window=7)).key_left("a.test") == 3
    assert _budget(rules, _count("a.test", window=12)).key_left("a.test") == 0  # never negative


def test_the_tighter_of_the_two_limits_wins() -> None:
    rules = RateRules(keys={"a.test": RateLimit(concurrency=5, per_minute=10)})
    assert _budget(rules, _count("a.test", in_flight=1, window=8)).key_left("a.test") == 2
    assert _budget(rules, _count("a.test", in_flight=4, window=1)).key_left("a.test") == 1


def test_the_default_applies_to_every_unnamed_key_and_a_name_replaces_it() -> None:
    rules = RateRules(
        keys={"named.test": RateLimit(per_minute=100)}, default=RateLimit(concurrency=1)
    )
    budget = _budget(rules, _count("busy.test", in_flight=1), _count("named.test", in_flight=7))
    assert budget.key_left("busy.test") == 0
    assert budget.key_left("fresh.test") == 1
    assert budget.key_left("named.test") == 100  # its own limits only: no concurrency cap


def test_kind_limits_count_every_key_of_the_kind() -> None:
    rules = RateRules(kinds={"noop": RateLimit(concurrency=3)})
    budget = _budget(rules, _count("a.test", in_flight=1), _count(None, in_flight=1))
    assert budget.kind_left("noop") == 1
    assert budget.kind_left("http_get") is None


def test_a_paused_key_gets_nothing_until_its_time_even_without_a_limit() -> None:
    paused = {"a.test": Slowdown(1.0, NOW + timedelta(seconds=30))}
    assert _budget(RateRules(), slowdowns=paused).key_left("a.test") == 0
    passed = {"a.test": Slowdown(1.0, NOW - timedelta(seconds=1))}
    assert _budget(RateRules(), slowdowns=passed).key_left("a.test") is None


def test_a_slowed_key_has_its_limits_scaled_never_below_one() -> None:
    rules = RateRules(keys={"a.test": RateLimit(concurrency=8, per_minute=40)})
    half = _budget(rules, slowdowns={"a.test": Slowdown(0.5)})
    assert half.key_left("a.test") == 4
    tiny = _budget(rules, slowdowns={"a.test": Slowdown(RATE_FACTOR_MIN / 4)})
    assert tiny.key_left("a.test") == 1


# ---------------------------------------------------------------- what the pending read skips


def test_skips_name_saturated_and_tight_keys_and_kinds() -> None:
    rules = RateRules(
        keys={"full.test": TWO_AT_ONCE, "idle.test": TWO_AT_ONCE},
        default=RateLimit(concurrency=3),
        kinds={"http_get": RateLimit(concurrency=1), "noop": RateLimit(concurrency=10)},
    )
    budget = _budget(
        rules,
        _count("full.test", in_flight=2),
        _count("some.test", in_flight=1),
        RateCount(None, "http_get", in_flight=1),
    )
    skips = budget.skips(free_slots=10)
    assert skips.saturated_keys == ("full.test",)
    # A named key with nothing in flight is still read for its budget alone: a backlog of it
    # never fills the main read.
    assert dict(skips.tight_keys) == {"idle.test": 2, "some.test": 2}
    assert skips.saturated_kinds == ("http_get",)
    assert dict(skips.tight_kinds) == {"noop": 7}


def test_a_budget_that_may_fill_every_free_slot_stays_in_the_main_read() -> None:
    rules = RateRules(default=RateLimit(concurrency=8))
    budget = _budget(rules, _count("a.test", in_flight=2), _count("b.test", in_flight=6))
    assert dict(budget.skips(free_slots=4).tight_keys) == {"b.test": 2}  # a.test: 6 left
    assert dict(budget.skips(free_slots=7).tight_keys) == {"b.test": 2, "a.test": 6}


def test_the_tight_reads_are_bounded_the_smallest_budgets_first() -> None:
    rules = RateRules(default=RateLimit(concurrency=RATE_TIGHT_MAX + 10))
    counts = [_count(f"k{i}.test", in_flight=i) for i in range(1, RATE_TIGHT_MAX + 10)]
    tight = _budget(rules, *counts).skips(free_slots=1000).tight_keys
    assert len(tight) == RATE_TIGHT_MAX
    assert min(tight.values()) == 1 and max(tight.values()) == RATE_TIGHT_MAX


def test_no_rules_no_skips() -> None:
    skips = _budget(RateRules(), _count("a.test", in_flight=50)).skips(free_slots=6)
    assert (skips.saturated_keys, dict(skips.tight_keys)) == ((), {})


# ---------------------------------------------------------------- the planner's admission


def _hosts(free: int) -> list[HostSlots]:
    return [HostSlots("h1", free, 0, free)]


def test_the_planner_gives_a_key_no_more_than_its_budget_and_fills_the_rest() -> None:
    rules = RateRules(keys={"slow.test": TWO_AT_ONCE})
    budget = _budget(rules, _count("slow.test", in_flight=1))
    pending = [Job(i, "slow.test") for i in range(1, 6)] + [Job(i, None) for i in range(6, 9)]
    plan = plan_assignments(_hosts(6), pending, set(), admission=budget.admission(pending))
    assert [job_id for job_id, _ in plan] == [1, 6, 7, 8]
    assert budget.key_left("slow.test") == 0


def test_a_job_that_finds_no_host_uses_no_budget() -> None:
    rules = RateRules(keys={"slow.test": TWO_AT_ONCE})
    budget = _budget(rules)
    pending = [Job(1, "slow.test", needs_browser=True), Job(2, "slow.test")]
    hosts = [HostSlots("h1", 6, 0, 6, takes_browser=False)]
    plan = plan_assignments(hosts, pending, set(), admission=budget.admission(pending))
    assert plan == [(2, "h1")]
    assert budget.key_left("slow.test") == 1


def test_kind_and_key_budgets_both_hold() -> None:
    rules = RateRules(
        keys={"a.test": RateLimit(concurrency=5)}, kinds={"noop": RateLimit(concurrency=2)}
    )
    budget = _budget(rules)
    pending = [Job(i, "a.test") for i in range(1, 5)] + [Job(9, "b.test", kind="http_get")]
    plan = plan_assignments(_hosts(6), pending, set(), admission=budget.admission(pending))
    assert [job_id for job_id, _ in plan] == [1, 2, 9]


# ---------------------------------------------------------------- back-off


def test_a_push_back_halves_the_factor_and_pauses_until_retry_after() -> None:
    retry_at = NOW + timedelta(seconds=30)
    slowed = next_slowdown(
        Slowdown(), ThrottleSeen(throttled=1, retry_at=retry_at), NOW, max_pause_s=DAY
    )
    assert slowed == Slowdown(0.5, retry_at)
    twice = next_slowdown(slowed, ThrottleSeen(throttled=2), NOW, max_pause_s=DAY)
    assert twice == Slowdown(0.125, retry_at)  # the pause already set stays


def test_the_factor_has_a_floor_and_a_retry_time_already_past_pauses_nothing() -> None:
    seen = ThrottleSeen(throttled=50, retry_at=NOW - timedelta(seconds=1))
    assert next_slowdown(Slowdown(), seen, NOW, max_pause_s=DAY) == Slowdown(RATE_FACTOR_MIN, None)


def test_successes_recover_step_by_step_up_to_one() -> None:
    state = Slowdown(RATE_FACTOR_MIN)
    steps = 0
    while state.factor < 1:
        state = next_slowdown(state, ThrottleSeen(completed=1), NOW, max_pause_s=DAY)
        steps += 1
    assert state == Slowdown(1.0)
    assert 5 < steps < 30, steps  # gradual, not at once, not forever
    assert state.is_neutral(NOW)


def test_a_pause_that_passed_is_forgotten() -> None:
    old = Slowdown(0.5, NOW - timedelta(seconds=1))
    assert next_slowdown(old, ThrottleSeen(completed=0), NOW, max_pause_s=DAY) == Slowdown(
        0.5, None
    )


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("rate_limits", {"example.org": {"per_minute": 0}}, "rate_limits.example.org.per_minute"),
        (
            "rate_limits",
            {"example.org": {"concurrency": -2}},
            "rate_limits.example.org.concurrency",
        ),
        ("rate_limits", {"example.org": {}}, "rate_limits.example.org"),
        ("rate_limit_default", {"concurrency": 0}, "rate_limit_default.concurrency"),
        ("kind_limits", {"http_get": {"per_minute": -1}}, "kind_limits.http_get.per_minute"),
        ("kind_limits", {"http_get": {"burst": 3}}, "kind_limits.http_get.burst"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(field: str, value: object, named: str) -> None:
    with pytest.raises(SettingsError, match=rf"setting '?{re.escape(named)}\b"):
        load_settings(**{field: value})


def test_limits_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_RATE_LIMITS", '{"example.org": {"concurrency": 2}}')
    monkeypatch.setenv("SCRAPEFLEET_RATE_LIMIT_DEFAULT", '{"per_minute": 30}')
    settings = load_settings()
    assert settings.rate_limits == {"example.org": RateLimit(concurrency=2)}
    assert settings.rate_limit_default == RateLimit(per_minute=30)


def test_the_default_rows_name_is_no_key_of_its_own() -> None:
    with pytest.raises(SettingsError, match=r"rate_limits .*'\*' is reserved"):
        load_settings(rate_limits={"*": {"concurrency": 1}})


# ---------------------------------------------------------------- crawled sites

CRAWLED_TWO = RateRules(crawled_site=RateLimit(concurrency=2))


def test_a_crawled_site_with_no_limit_gets_the_crawl_default() -> None:
    budget = _budget(CRAWLED_TWO, RateCount("docs.test", "crawl", in_flight=1))
    assert budget.key_left("docs.test") == 1
    assert budget.skips(free_slots=12).tight_keys == {"docs.test": 1}
    assert budget.key_left("api.test") is None  # no crawl on it: no limit


def test_the_first_crawl_jobs_of_a_site_take_its_default_then_it_is_full() -> None:
    budget = _budget(CRAWLED_TWO)
    assert budget.key_left("docs.test") is None  # an http_get asks first: no limit
    pending = [Job(i, "docs.test", kind="crawl") for i in range(1, 61)]
    hosts = [HostSlots(f"h{n}", 6, 0, 6) for n in range(10)]  # ten hosts of six
    placed = plan_assignments(hosts, pending, set(), admission=budget.admission(pending))
    assert len(placed) == 2


def test_a_named_limit_or_the_default_wins_over_the_crawl_default() -> None:
    rules = RateRules(
        keys={"docs.test": RateLimit(concurrency=5)},
        default=RateLimit(concurrency=3),
        crawled_site=RateLimit(concurrency=2),
    )
    budget = _budget(rules, RateCount("docs.test", "crawl"), RateCount("b.test", "crawl"))
    assert (budget.key_left("docs.test"), budget.key_left("b.test")) == (5, 3)


def test_the_crawl_default_is_a_setting() -> None:
    assert RateRules.from_settings(load_settings()).crawled_site == RateLimit(concurrency=2)
    unset = load_settings(crawl_site_concurrency=None)
    assert RateRules.from_settings(unset).crawled_site is None


def test_a_crawl_delay_key_gets_one_job_and_none_before_its_next_start() -> None:
    later = NOW + timedelta(seconds=1)
    budget = RateBudget(CRAWLED_TWO, [], {}, NOW, {"slow.test": later, "due.test": NOW})
    assert budget.key_left("slow.test", "crawl") == 0
    assert budget.key_left("due.test", "crawl") == 1  # not two: one request per delay
    assert budget.skips(free_slots=12).saturated_keys == ("slow.test",)
    no_limit = RateBudget(RateRules(), [], {}, NOW, {"due.test": NOW})
    assert no_limit.key_left("due.test") == 1


def test_robots_crawl_delay_and_request_rate_are_capped_seconds() -> None:
    from scrapefleet.common.constants import MAX_CRAWL_DELAY_S
    from scrapefleet.common.crawl.robots import rules_from_answer

    def delay(text: str) -> float | None:
        return rules_from_answer("u", 200, text.encode()).crawl_delay("scrapefleet/0.1")

    assert delay("User-agent: *\nCrawl-delay: 2.5\n") == 2.5
    assert delay("User-agent: *\nRequest-rate: 1/5s\nCrawl-delay: 1\n") == 5.0
    assert delay("User-agent: *\nCrawl-delay: 86400\n") == MAX_CRAWL_DELAY_S
    assert delay("User-agent: *\nDisallow: /x\n") is None


def test_a_pause_a_host_asks_for_is_capped_at_retry_after_max_s() -> None:
    # A job rate limited with not_before = 9999-12-31 would pause its site for the whole fleet.
    forever = datetime(9999, 12, 31, tzinfo=UTC)
    seen = ThrottleSeen(throttled=1, retry_at=forever)
    slowed = next_slowdown(Slowdown(), seen, NOW, max_pause_s=600)
    assert slowed == Slowdown(0.5, NOW + timedelta(seconds=600))
    # A pause saved before (or by a producer without the cap) is capped when read again.
    assert capped_pause(Slowdown(0.5, forever), NOW, 600) == slowed
    assert capped_pause(Slowdown(0.5, NOW), NOW, 600) == Slowdown(0.5, NOW)


def test_the_producer_wakes_when_a_delayed_key_may_start_again() -> None:
    delays = {"slow.test": 1.0, "slower.test": 5.0, "gone.test": 1.0}
    placed = {
        "slow.test": NOW - timedelta(seconds=0.25),  # due in 0.75 s
        "slower.test": NOW - timedelta(seconds=1),  # due in 4 s
        "free.test": NOW,  # no delay: no wake for it
    }
    assert next_paced_start(delays, placed, NOW) == NOW + timedelta(seconds=0.75)
    waited_out = {"slow.test": NOW - timedelta(seconds=2)}
    assert next_paced_start(delays, waited_out, NOW) is None  # due already: nothing to wake for
    assert next_paced_start({}, placed, NOW) is None
