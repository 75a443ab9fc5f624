"""Retry decisions, pure: whether a failed attempt is retried, and when."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from scrapefleet.common import constants as C
from scrapefleet.common.settings import setting_default
from scrapefleet.common.store.statuses import attempts_exhausted


def backoff_delay_s(
    attempt: int,
    *,
    base_s: float = setting_default("backoff_base_s"),
    max_s: float = setting_default("backoff_max_s"),
    jitter: float = C.BACKOFF_JITTER,
    rng: random.Random | None = None,
) -> float:
    """Delay after failed attempt number ``attempt`` (1-based): base * 2^(attempt-1), capped,
    then spread by +/- ``jitter`` so that jobs failing together do not retry together."""
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    delay = min(max_s, base_s * 2 ** min(attempt - 1, 32))
    spread = (rng or random).uniform(-jitter, jitter)
    return max(0.0, min(max_s, delay * (1 + spread)))


def retry_at(
    attempt: int,
    max_attempts: int,
    now: datetime,
    *,
    base_s: float = setting_default("backoff_base_s"),
    max_s: float = setting_default("backoff_max_s"),
    rng: random.Random | None = None,
) -> datetime | None:
    """When to run the job again after failed attempt ``attempt``; None = attempts exhausted."""
    if attempts_exhausted(attempt, max_attempts):
        return None
    return now + timedelta(seconds=backoff_delay_s(attempt, base_s=base_s, max_s=max_s, rng=rng))
