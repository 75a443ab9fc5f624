"""The restart/reboot policy of a consumer host, as pure functions of plain counters.

A browser stack runs exactly ``restart_every`` browser jobs per lifetime and a host exactly
``reboot_every`` per boot: the consumer stops claiming browser jobs when a budget is spent, lets
the in-flight jobs finish, then does the maintenance. A budget of 0 disables that maintenance.
The counters count claims (not completions), so a job that fails still uses up its place.
A stack that would not start is tried again after a back-off that doubles up to a cap.
"""

from __future__ import annotations

from typing import Literal

Maintenance = Literal["none", "restart", "reboot"]


def _remaining(done: int, every: int) -> int | None:
    """Claims left before `every` is reached; None when this maintenance is disabled."""
    if every <= 0:
        return None
    return max(every - done, 0)


def decide_maintenance(
    jobs_since_restart: int, jobs_since_boot: int, restart_every: int, reboot_every: int
) -> Maintenance:
    """What to do once the host has drained. A reboot also restarts the stack, so it wins."""
    if _remaining(jobs_since_boot, reboot_every) == 0:
        return "reboot"
    if _remaining(jobs_since_restart, restart_every) == 0:
        return "restart"
    return "none"


def claims_allowed(
    jobs_since_restart: int,
    jobs_since_boot: int,
    restart_every: int,
    reboot_every: int,
    capacity: int,
    in_flight: int,
) -> int:
    """How many jobs the consumer may claim now: free slots, capped by both budgets.

    Zero with nothing in flight and a budget spent means: do the maintenance now.
    """
    allowed = max(capacity - in_flight, 0)
    for left in (
        _remaining(jobs_since_restart, restart_every),
        _remaining(jobs_since_boot, reboot_every),
    ):
        if left is not None:
            allowed = min(allowed, left)
    return allowed


def maintenance_due(
    jobs_since_restart: int,
    jobs_since_boot: int,
    restart_every: int,
    reboot_every: int,
    in_flight: int,
) -> Maintenance:
    """The maintenance to start now: one whose budget is spent, once no job is in flight."""
    if in_flight > 0:
        return "none"
    return decide_maintenance(jobs_since_restart, jobs_since_boot, restart_every, reboot_every)


def retry_delay_s(failures: int, base_s: float, max_s: float) -> float:
    """Wait before the next try of a stack that failed ``failures`` times in a row: ``base_s``
    after the first failure, doubling, never more than ``max_s``."""
    return float(min(base_s * 2 ** max(failures - 1, 0), max_s))
