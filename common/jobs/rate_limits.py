"""Politeness limits: their settings' shape, what the database counts, and the adaptive back-off.

A job's ``rate_key`` names what it loads (by default the host of its payload's ``url`` for the
built-in actions, set by a trigger at insert: migration 0013); settings give a key, and a kind,
at most ``concurrency`` jobs queued or running fleet-wide and at most ``per_minute`` attempts
started in the trailing minute. A key the site pushes back on (a rate-limited or blocked
attempt) is slowed: its limits scaled down by a factor that halves per push-back and recovers a
step per success, and paused until a Retry-After passed. These are plain values and pure
functions; the producer (producer.assigning.rate_budget) applies them, the store keeps the state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scrapefleet.common.constants import (
    RATE_FACTOR_MIN,
    RATE_FACTOR_RECOVERY,
    RATE_WINDOW_S,
)

__all__ = [
    "CRAWL_KINDS",
    "NO_SLOWDOWN",
    "RATE_KEY_DEFAULT_ROW",
    "RATE_KEY_MAX_CHARS",
    "URL_KEYED_KINDS",
    "PendingSkips",
    "RateCount",
    "RateLimit",
    "Slowdown",
    "ThrottleSeen",
    "capped_pause",
    "check_rate_key",
    "next_slowdown",
]

# The built-in actions whose rate key defaults to their URL's host (the trigger in migration
# 0013 lists the same kinds; a test checks they agree).
URL_KEYED_KINDS = ("fetch_page", "screenshot", "http_get", "crawl", "crawl_browser")
# The crawl actions (common.crawl.action): a key with their jobs is a crawled site, held to
# crawl_site_concurrency when no other limit names it.
CRAWL_KINDS = ("crawl", "crawl_browser")
RATE_KEY_MAX_CHARS = 200
RATE_KEY_DEFAULT_ROW = "*"  # the rate_keys row that holds the default limits: never a job's key


class RateLimit(BaseModel):
    """One key's (or kind's) limits; either may be left out, not both."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    concurrency: int | None = Field(default=None, gt=0, description="queued + running at once")
    per_minute: int | None = Field(
        default=None, gt=0, description=f"attempts started in the trailing {RATE_WINDOW_S:g} s"
    )

    @model_validator(mode="after")
    def _something(self) -> RateLimit:
        if self.concurrency is None and self.per_minute is None:
            raise ValueError("give concurrency, per_minute or both")
        return self

    def scaled(self, factor: float) -> RateLimit:
        """These limits slowed by ``factor`` (0 < factor <= 1), never below one."""
        if factor >= 1:
            return self
        return RateLimit(
            concurrency=None if self.concurrency is None else _scale(self.concurrency, factor),
            per_minute=None if self.per_minute is None else _scale(self.per_minute, factor),
        )


def check_rate_key(key: str) -> str:
    """A key as a job or a setting may name it; ValueError says why not."""
    if not 1 <= len(key) <= RATE_KEY_MAX_CHARS:
        raise ValueError(f"a rate key has 1 to {RATE_KEY_MAX_CHARS} characters: {key[:40]!r}")
    if key == RATE_KEY_DEFAULT_ROW:  # rate_keys' row of the default limits
        raise ValueError(f"{RATE_KEY_DEFAULT_ROW!r} is reserved (set rate_limit_default)")
    return key


def _scale(limit: int, factor: float) -> int:
    return max(1, math.floor(limit * factor))


@dataclass(frozen=True)
class RateCount:
    """Figures for one (rate key, kind): jobs queued or running now, and the trailing window's
    use: attempts started in it, plus jobs queued that are about to start."""

    rate_key: str | None
    kind: str
    in_flight: int = 0
    window: int = 0


@dataclass(frozen=True)
class Slowdown:
    """A key's back-off: its limits scaled by ``factor``; no job at all before ``paused_until``."""

    factor: float = 1.0
    paused_until: datetime | None = None

    def paused(self, now: datetime) -> bool:
        return self.paused_until is not None and self.paused_until > now

    def is_neutral(self, now: datetime) -> bool:
        return self.factor >= 1 and not self.paused(now)


NO_SLOWDOWN = Slowdown()


@dataclass(frozen=True)
class PendingSkips:
    """What the pending read leaves out: keys and kinds at their limit, and those with only a
    little budget left (name -> jobs it may still get), which are read for that many alone."""

    saturated_keys: tuple[str, ...] = ()
    tight_keys: Mapping[str, int] = field(default_factory=dict)
    saturated_kinds: tuple[str, ...] = ()
    tight_kinds: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ThrottleSeen:
    """What a key's attempts said since the last look: how many were pushed back (rate limited
    or blocked), the latest time one of them may be retried (its Retry-After), how many
    completed, and the site's Crawl-delay if its crawl pages reported one."""

    throttled: int = 0
    retry_at: datetime | None = None
    completed: int = 0
    crawl_delay_s: float | None = None  # the longest Crawl-delay its crawl pages reported


def next_slowdown(
    current: Slowdown, seen: ThrottleSeen, now: datetime, *, max_pause_s: float
) -> Slowdown:
    """Halve the factor per push-back (down to RATE_FACTOR_MIN) and pause until the latest
    Retry-After; with no push-back, recover one RATE_FACTOR_RECOVERY step per completion.
    A pause already passed is forgotten. The retry time comes from a job a host wrote (its
    ``not_before``): the pause ends ``max_pause_s`` (retry_after_max_s) from now at the latest,
    whatever it said, or one host could pause a site for the whole fleet for ever."""
    factor = current.factor
    paused_until = current.paused_until if current.paused(now) else None
    if seen.throttled:
        factor = max(RATE_FACTOR_MIN, factor * 0.5**seen.throttled)
        if seen.retry_at is not None and seen.retry_at > now:
            paused_until = max(paused_until or seen.retry_at, seen.retry_at)
    elif seen.completed:
        factor = min(1.0, factor * RATE_FACTOR_RECOVERY**seen.completed)
    return capped_pause(Slowdown(factor, paused_until), now, max_pause_s)


def capped_pause(slowdown: Slowdown, now: datetime, max_pause_s: float) -> Slowdown:
    """The slowdown with its pause ending ``max_pause_s`` from now at the latest."""
    latest = now + timedelta(seconds=max_pause_s)
    if slowdown.paused_until is None or slowdown.paused_until <= latest:
        return slowdown
    return Slowdown(slowdown.factor, latest)
