"""The producer's warnings about sites pushing back, at most one line per key per window.

A push-back ends an attempt, and an attempt's end wakes the producer, so a site refusing a burst
of jobs was one warning per cycle: 2-5 lines within 50 ms for one key, every few seconds, most
of a producer's log. The first push-back of a key is said at once; the ones within the next
``every_s`` are counted and said in one line when the window has passed (``due``), so no
push-back goes uncounted and a quiet key is forgotten. Pure: the caller gives the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scrapefleet.common.jobs.rate_limits import Slowdown

Said = list[tuple[str, int]]  # (key, push-backs to say now)


@dataclass
class _Window:
    said_at: datetime  # when its last line was due
    held: int = 0  # push-backs since, not said yet


class PushBackLog:
    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._windows: dict[str, _Window] = {}

    @property
    def tracked(self) -> int:
        return len(self._windows)

    def note(self, key: str, times: int, now: datetime) -> Said:
        """``times`` more push-backs on ``key``: what to say now (nothing within its window)."""
        window = self._windows.get(key)
        if window is None or self._passed(window, now):
            held = window.held if window is not None else 0
            self._windows[key] = _Window(now)
            return [(key, held + times)]
        window.held += times
        return []

    def due(self, now: datetime) -> Said:
        """The counts held past their window, said now; keys quiet for a whole window go."""
        said: Said = []
        for key, window in list(self._windows.items()):
            if not self._passed(window, now):
                continue
            if window.held:
                said.append((key, window.held))
                self._windows[key] = _Window(now)
            else:
                del self._windows[key]
        return said

    def _passed(self, window: _Window, now: datetime) -> bool:
        return (now - window.said_at).total_seconds() >= self.every_s


def pushback_line(key: str, times: int, slowdown: Slowdown, *, limited: bool) -> str:
    """One warning: how often, and what the key is held to now. A key with no limit has nothing
    to scale: it is only paused (by a Retry-After), never "slowed"."""
    held = []
    if limited and slowdown.factor < 1:
        held.append(f"its limits slowed to {slowdown.factor:.3g}x")
    if slowdown.paused_until is not None:
        held.append(f"paused until {slowdown.paused_until:%H:%M:%S}")
    text = ", ".join(held) or "nothing held"
    if not limited:
        text += " (no limit to slow)"
    return f"rate key {key} pushed back {times} time(s): {text}"
