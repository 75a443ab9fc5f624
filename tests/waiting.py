"""Tests wait on conditions with a deadline, never on a fixed sleep: this is the one way they do.

Every deadline scales with one factor, SCRAPEFLEET_TEST_SLOWNESS (default 1): on a loaded
machine, raise it (say to 3) rather than editing deadlines. conftest.py scales each test's
timeout by the same factor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _slowness() -> float:
    raw = os.environ.get("SCRAPEFLEET_TEST_SLOWNESS", "1")
    try:
        factor = float(raw)
    except ValueError:
        raise SystemExit(f"SCRAPEFLEET_TEST_SLOWNESS={raw!r}: not a number") from None
    if not 0.1 <= factor <= 100:
        raise SystemExit(f"SCRAPEFLEET_TEST_SLOWNESS={raw!r}: must be between 0.1 and 100")
    return factor


SLOWNESS = _slowness()


def scaled(seconds: float) -> float:
    """A deadline in seconds, stretched by SCRAPEFLEET_TEST_SLOWNESS."""
    return seconds * SLOWNESS


def wait_for(
    condition: Callable[[], T | None],
    timeout_s: float = 10.0,
    what: str = "condition",
    between: Callable[[], None] | None = None,
    poll_s: float = 0.02,
) -> T:
    """Call ``condition`` until it returns something truthy (returned), or fail naming ``what``
    after ``timeout_s`` (scaled by SCRAPEFLEET_TEST_SLOWNESS). ``between`` runs after each miss
    (e.g. to sample a cap)."""
    timeout_s = scaled(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        if between is not None:
            between()
        time.sleep(poll_s)
