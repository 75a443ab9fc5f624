"""Schedules' pure part (common.jobs.recurrence): cron and zone parsing, slots, the plan of a
fire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.jobs.recurrence import (
    MISSED_GRACE_S,
    CatchUp,
    check_name,
    parse_cron,
    plan_fire,
    slots_of,
)
from scrapefleet.common.store import NewJob, jobs_of

DAILY_7_PARIS = parse_cron("0 7 * * *", "Europe/Paris")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("cron", "zone", "message"),
    [
        ("61 * * * *", "UTC", "--cron: '61 * * * *': Error validating expression '61'"),
        ("* * *", "UTC", "--cron: '* * *' has 3 fields, not 5"),
        ("0 7 * * * *", "UTC", "--cron: '0 7 * * * *' has 6 fields, not 5"),
        ("0 7 * * mon-xyz", "UTC", "--cron: '0 7 * * mon-xyz'"),
        ("0 7 * * *", "Mars/Olympus", "--tz: unknown time zone 'Mars/Olympus'"),
        ("0 7 * * *", "../etc/passwd", "--tz: unknown time zone"),
    ],
)
def test_a_bad_cron_or_zone_is_named(cron: str, zone: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_cron(cron, zone)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_slots_follow_the_zones_clock_across_daylight_saving() -> None:
    # Paris moves from UTC+1 to UTC+2 on 2026-03-29: 07:00 local is 06:00 then 05:00 UTC.
    first = DAILY_7_PARIS.next_after(at("2026-03-28T00:00:00+00:00"))
    second = DAILY_7_PARIS.next_after(first)
    assert (first, second) == (at("2026-03-28T06:00:00+00:00"), at("2026-03-29T05:00:00+00:00"))


def test_the_next_slot_is_strictly_after() -> None:
    slot = at("2026-11-27T07:00:00+01:00")
    assert DAILY_7_PARIS.next_after(slot) == at("2026-11-28T07:00:00+01:00")
    assert DAILY_7_PARIS.next_after(slot - timedelta(microseconds=1)) == slot


def test_nothing_fires_before_its_slot() -> None:
    slot = at("2026-11-27T06:00:00+00:00")
    assert plan_fire(DAILY_7_PARIS, slot, slot - timedelta(microseconds=1), CatchUp.ONCE) is None
    plan = plan_fire(DAILY_7_PARIS, slot, slot, CatchUp.ONCE)
    assert plan is not None and plan.fire and plan.slot == slot and plan.missed == 0
    assert plan.next_run_at == at("2026-11-28T06:00:00+00:00")


def test_after_downtime_catch_up_once_fires_one_run_for_the_latest_slot() -> None:
    stored = at("2026-11-24T06:00:00+00:00")
    now = at("2026-11-27T09:30:00+00:00")  # four slots passed: the 24th to the 27th
    plan = plan_fire(DAILY_7_PARIS, stored, now, CatchUp.ONCE)
    assert plan is not None
    assert (plan.fire, plan.slot, plan.missed) == (True, at("2026-11-27T06:00:00+00:00"), 3)
    assert plan.expected == stored and plan.next_run_at == at("2026-11-28T06:00:00+00:00")


def test_catch_up_skip_fires_only_a_slot_that_is_just_late() -> None:
    slot = at("2026-11-27T06:00:00+00:00")
    on_time = plan_fire(DAILY_7_PARIS, slot, slot + timedelta(seconds=30), CatchUp.SKIP)
    assert on_time is not None and on_time.fire
    late = slot + timedelta(seconds=MISSED_GRACE_S + 1)
    missed = plan_fire(DAILY_7_PARIS, slot, late, CatchUp.SKIP)
    assert missed is not None and not missed.fire and missed.slot == slot
    assert missed.next_run_at == at("2026-11-28T06:00:00+00:00")


def test_a_very_long_downtime_is_counted_up_to_a_bound_and_jumps_past_now() -> None:
    every_minute = parse_cron("* * * * *")
    stored = at("2020-01-01T00:00:00+00:00")
    now = at("2026-11-27T06:00:30+00:00")
    plan = plan_fire(every_minute, stored, now, CatchUp.ONCE)
    assert plan is not None and plan.fire and plan.next_run_at == at("2026-11-27T06:01:00+00:00")


@pytest.mark.parametrize("name", ["", " lead", "trail ", "a\nb", "x" * 201])
def test_a_bad_name_is_refused(name: str) -> None:
    with pytest.raises(SubmitError, match="schedule name"):
        check_name(name)


def test_stored_jobs_survive_a_version_that_knows_other_fields() -> None:
    stored = [{"kind": "noop", "payload": {"a": 1}, "field_of_a_later_version": True}]
    assert jobs_of(stored) == (NewJob("noop", {"a": 1}),)


def test_an_interval_counts_its_slots_from_its_creation() -> None:
    created = at("2026-11-27T06:10:00+00:00")
    every = slots_of(None, "Europe/Paris", 1800.0, created)
    assert every.next_after(created - timedelta(days=1)) == created + timedelta(minutes=30)
    assert every.next_after(created) == created + timedelta(minutes=30)
    assert every.next_after(at("2026-11-27T07:40:00+00:00")) == at("2026-11-27T08:10:00+00:00")
    # Across Paris' change of time, an interval stays an interval.
    spring = slots_of(None, "Europe/Paris", 3600.0, at("2026-03-29T00:30:00+00:00"))
    assert spring.next_after(at("2026-03-29T01:30:00+00:00")) == at("2026-03-29T02:30:00+00:00")


def test_after_downtime_an_interval_fires_once_for_its_latest_slot() -> None:
    created = at("2026-11-27T06:00:00+00:00")
    every = slots_of(None, "UTC", 600.0, created)
    plan = plan_fire(
        every, created + timedelta(minutes=10), at("2026-11-27T07:05:00+00:00"), CatchUp.ONCE
    )
    assert plan is not None
    assert (plan.slot, plan.missed) == (at("2026-11-27T07:00:00+00:00"), 5)
    assert plan.next_run_at == at("2026-11-27T07:10:00+00:00")


def test_a_schedule_needs_a_cron_or_an_interval() -> None:
    with pytest.raises(SubmitError, match="needs --cron or --every"):
        slots_of(None, "UTC", None, at("2026-11-27T06:00:00+00:00"))
