"""How long ago a moment was, in the words an operator scans a table with ("5 min ago").

The absolute time stays one hover away (the ``title`` of the ``<time>`` element the ``when``
macro writes): a relative age answers "is this fresh?" at a glance, the absolute one answers
"which log line is it?".
"""

from __future__ import annotations

from datetime import datetime

# (seconds in the unit, its label): the largest unit that gives at least 1 is used.
UNITS = ((86_400, "d"), (3_600, "h"), (60, "min"), (1, "s"))
JUST_NOW_S = 5  # closer than this, a count of seconds is noise


def relative_age(value: datetime, now: datetime) -> str:
    """``value`` relative to ``now``: "just now", "42 s ago", "3 h ago", "in 5 min"."""
    seconds = (now - value).total_seconds()
    if abs(seconds) < JUST_NOW_S:
        return "just now"
    magnitude = abs(seconds)
    size, label = next((size, label) for size, label in UNITS if magnitude >= size)
    amount = int(magnitude // size)
    return f"{amount} {label} ago" if seconds > 0 else f"in {amount} {label}"
