"""The audit trail's writers: the message the ``jobs_audit`` trigger puts on this transaction's
job_events rows (the trigger writes the rows themselves, so even a hand-written UPDATE is
audited), and the host_events rows, which the store writes beside each host change.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

__all__ = [
    "INSERT_HOST_EVENT_SQL",
    "SET_AUDIT_MESSAGE_SQL",
    "record_host_event",
    "set_audit_message",
]

SET_AUDIT_MESSAGE_SQL = statement("SELECT set_config('scrapefleet.audit_message', :m, true)")
INSERT_HOST_EVENT_SQL = statement(
    """
INSERT INTO host_events (host, event, from_state, to_state, message, details)
VALUES (:host, :event, :from_state, :to_state, :message, CAST(:details AS jsonb))
"""
)


def set_audit_message(conn: Connection, message: str) -> None:
    """The message the audit trigger writes for the job changes of this transaction."""
    conn.execute(SET_AUDIT_MESSAGE_SQL, {"m": message})


def record_host_event(
    conn: Connection,
    host: str,
    event: str,
    *,
    from_state: str | None = None,
    to_state: str | None = None,
    message: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        INSERT_HOST_EVENT_SQL,
        {
            "host": host,
            "event": event,
            "from_state": from_state,
            "to_state": to_state,
            "message": message,
            "details": json.dumps(details) if details is not None else None,
        },
    )
