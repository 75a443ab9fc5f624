"""A consumer's reports about its browser stack: starts, restarts, reboots and faults.

The host's browser budgets (jobs_since_restart, jobs_since_boot) are counted by claims; these
reset them and keep the events, with their figures, in host_events.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.store.consuming.releases import (
    requeue_host_browser_jobs,
    requeue_host_queued,
)
from scrapefleet.common.store.events import record_host_event
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "SET_STACK_COUNTER_SQL",
    "begin_stack_lifetime",
    "record_reboot_request",
    "record_stack_failure",
    "reset_restart_counter",
]

# Through the function a consumer's role may call (migration 0017), within its bounds.
SET_STACK_COUNTER_SQL = statement("SELECT host_set_stack_counter(:name, :n)")


def reset_restart_counter(conn: Connection, name: str, details: dict[str, Any]) -> None:
    """After a browser stack restart: the since-restart count starts again; the event keeps
    the figures (duration, memory before/after, processes killed)."""
    conn.execute(SET_STACK_COUNTER_SQL, {"name": name, "n": 0})
    record_host_event(conn, name, "restart", details=details)


def begin_stack_lifetime(
    conn: Connection, name: str, jobs_in_flight: int, details: dict[str, Any]
) -> None:
    """A browser stack started where none ran (first browser job of this consumer, or after a
    failed start): its lifetime counts the jobs already in flight, which may use it."""
    conn.execute(SET_STACK_COUNTER_SQL, {"name": name, "n": jobs_in_flight})
    record_host_event(conn, name, "stack_start", details=details)


def record_reboot_request(conn: Connection, name: str, reason: str) -> list[int]:
    """The host is about to run its reboot command: its queued jobs go back to pending at once
    (the producer would otherwise wait out the offline grace), and the event is kept."""
    requeued = requeue_host_queued(conn, name, f"requeued: host {name} rebooting")
    record_host_event(conn, name, "reboot", message=reason, details={"requeued": len(requeued)})
    return requeued


def record_stack_failure(
    conn: Connection, name: str, reason: str, details: dict[str, Any]
) -> list[int]:
    """The host's browser stack would not start: the host stays in the fleet for every other
    job, and the browser jobs queued on it go back to pending for hosts whose stack runs."""
    record_host_event(conn, name, "stack_failure", message=reason, details=details)
    return requeue_host_browser_jobs(conn, name, f"requeued: browser stack of {name} failing")
