"""Start deadlines that count only the time their process could run.

A browser stack's start waits with a deadline (the Grid ready within ``stack_start_timeout_s``).
When the consumer is frozen (SIGSTOP, a VM paused) or the host is starved of CPU, the monotonic
clock runs on while nothing of the start does: the deadline passes, and a stack that was about
to be ready is failed and backed off for a minute. Here each short sleep of the wait is timed;
a sleep that overran by more than ``STALL_S`` is a pause of the process, and that time is given
back to the deadline (re-armed), so only time the start could use counts.
"""

from __future__ import annotations

from dataclasses import dataclass

STALL_S = 1.0  # a sleep overrunning by more than this was a pause of the process, not slowness


@dataclass
class RunningDeadline:
    end: float  # time.monotonic() value
    given_back_s: float = 0.0  # pauses re-armed so far

    @classmethod
    def after(cls, timeout_s: float, now: float) -> RunningDeadline:
        return cls(now + timeout_s)

    def left(self, now: float) -> float:
        return self.end - now

    def slept(self, asked_s: float, started: float, ended: float) -> None:
        """A sleep of ``asked_s`` ran from ``started`` to ``ended``: an overrun past STALL_S is
        given back."""
        overrun = (ended - started) - asked_s
        if overrun > STALL_S:
            self.end += overrun
            self.given_back_s += overrun


def paused_past(limit_s: float, started: float, ended: float) -> float:
    """How long a wait bounded by ``limit_s`` that ran from ``started`` to ``ended`` overran its
    limit, when that is more than STALL_S: the process was paused past the limit (the wait gave
    up when it ran again, not because the other side took that long). 0.0 otherwise."""
    overrun = (ended - started) - limit_s
    return overrun if overrun > STALL_S else 0.0
