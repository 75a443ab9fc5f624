"""Tests wait on conditions with a deadline, never on a fixed sleep: this is the one way they do."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    timeout_s: float = 10.0,
    what: str = "condition",
    between: Callable[[], None] | None = None,
    poll_s: float = 0.02,
) -> T:
    """Call ``condition`` until it returns something truthy (returned), or fail naming ``what``
    after ``timeout_s``. ``between`` runs after each miss (e.g. to sample a cap)."""
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
