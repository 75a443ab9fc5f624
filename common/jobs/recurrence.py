"""Recurring submissions ("schedules"): when each period falls and what to do at a fire time.

A schedule is a cron expression in a time zone, or an interval counted from the schedule's
creation, and the jobs to submit at each of its periods (a *slot*: the cron time itself, or
creation + k intervals; timezone-aware). The leading producer fires due schedules
(producer.background.schedule_firing); the database keeps each slot to one run
(common.store.operating.schedules). Here, pure functions only: parsing the cron and the zone, the
slots after a time, and the plan of one fire from the stored next slot and the time now.

After downtime several slots may have passed. ``catch_up``:

- ``once`` (default): one run, for the latest slot passed (not one per missed slot: a scraper
  run three times in a row at start-up is load on a site and no more data);
- ``skip``: none, unless the latest is less than MISSED_GRACE_S late (recorded as skipped).

Either way the next slot is the first one after now: nothing is fired early, and a paused
schedule that resumes starts from its next slot after the resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from scrapefleet.common.errors import SubmitError

# A slot fired later than this after its time counts as missed (for catch_up = skip): a
# producer restart or a standby's takeover takes seconds, downtime takes longer.
MISSED_GRACE_S = 600.0
# Slots counted when catching up after a long downtime; beyond it "at least this many".
MAX_SLOTS_COUNTED = 10_000
NAME_MAX_CHARS = 200
ONE_MICROSECOND = timedelta(microseconds=1)


class CatchUp(StrEnum):
    ONCE = "once"
    SKIP = "skip"


class Overlap(StrEnum):
    ALLOW = "allow"  # fire whatever the last run's jobs are doing
    SKIP = "skip"  # not while a job of the last run is unfinished


class RunOutcome(StrEnum):
    FIRED = "fired"
    MANUAL = "manual"  # `schedules run`: an operator's extra run, outside the slots
    SKIPPED_MISSED = "skipped_missed"
    SKIPPED_OVERLAP = "skipped_overlap"


@dataclass(frozen=True)
class Cron:
    expression: str
    timezone: str
    trigger: CronTrigger

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after ``moment`` (timezone-aware)."""
        slot = self.trigger.get_next_fire_time(None, moment + ONE_MICROSECOND)
        if slot is None:  # a 5-field cron always has a next time; a guard for mypy and sanity
            raise SubmitError(f"cron {self.expression!r} has no time after {moment.isoformat()}")
        return slot


@dataclass(frozen=True)
class Every:
    """Slots every ``every_s`` seconds from ``anchor`` (the schedule's creation), whatever the
    zone's clock does: an interval, not a time of day."""

    every_s: float
    anchor: datetime

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after ``moment``."""
        step = timedelta(seconds=self.every_s)
        if moment < self.anchor:
            return self.anchor + step
        passed = (moment - self.anchor) // step
        return self.anchor + (passed + 1) * step


Slots = Cron | Every


def slots_of(cron: str | None, timezone: str, every_s: float | None, anchor: datetime) -> Slots:
    """A stored schedule's slots: its cron in its zone, else its interval from ``anchor``."""
    if cron is not None:
        return parse_cron(cron, timezone)
    if every_s is None or every_s < 1:
        raise SubmitError("a schedule needs --cron or --every (at least 1 s)")
    return Every(every_s, anchor)


def parse_cron(expression: str, timezone: str = "UTC") -> Cron:
    """A 5-field cron expression in an IANA time zone; SubmitError names the bad one."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SubmitError(
            f"--tz: unknown time zone {timezone!r} (e.g. UTC, Europe/Paris)"
        ) from None
    fields = expression.split()
    if len(fields) != 5:
        raise SubmitError(
            f"--cron: {expression!r} has {len(fields)} fields, not 5"
            " (minute hour day-of-month month day-of-week)"
        )
    try:
        trigger = CronTrigger.from_crontab(" ".join(fields), timezone=zone)
    except ValueError as exc:
        raise SubmitError(f"--cron: {expression!r}: {exc}") from None
    return Cron(" ".join(fields), timezone, trigger)


def check_name(name: str) -> str:
    if not 1 <= len(name) <= NAME_MAX_CHARS or not name.isprintable() or name != name.strip():
        raise SubmitError(
            f"schedule name {name[:40]!r}: 1 to {NAME_MAX_CHARS} printable characters,"
            " no leading or trailing space"
        )
    return name


@dataclass(frozen=True)
class FirePlan:
    """What a producer does with a schedule whose stored next slot is ``expected``."""

    expected: datetime  # the stored next_run_at the firing UPDATE must still find
    slot: datetime  # the period this run stands for (the run's key)
    next_run_at: datetime  # the first slot after now
    fire: bool  # False: record the slot as missed, submit nothing
    missed: int  # slots passed before ``slot`` that get no run of their own


def plan_fire(cron: Slots, expected: datetime, now: datetime, catch_up: CatchUp) -> FirePlan | None:
    """None when ``expected`` is still ahead of ``now`` (never fire early)."""
    if expected > now:
        return None
    slot, missed = expected, 0
    following = cron.next_after(slot)
    while following <= now and missed < MAX_SLOTS_COUNTED:
        slot, missed = following, missed + 1
        following = cron.next_after(slot)
    if following <= now:  # counted as far as we count: jump straight past now
        slot, following = now, cron.next_after(now)
    late_s = (now - slot).total_seconds()
    # Skip: the latest slot still runs when it is only just late (a restart, a takeover).
    fire = catch_up is CatchUp.ONCE or late_s <= MISSED_GRACE_S
    return FirePlan(expected, slot, following, fire, missed)
