"""Webhook deliveries: taken under a lease, then recorded as delivered, due again or given up.

The rows themselves come from the ``jobs_webhook_enqueue`` trigger, so no path that finishes a
job can forget one.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.store.records import DueWebhook

__all__ = [
    "DELIVERED_SQL",
    "DELIVERY_FAILED_SQL",
    "TAKE_DUE_WEBHOOKS_SQL",
    "record_webhook_delivered",
    "record_webhook_failed",
    "take_due_webhooks",
]

# last_error is shown on the dashboard's job page, which needs no login: it holds one line of
# the sender's own words, never what a receiver answered, and never much of it.
LAST_ERROR_CHARS = 300

# The attempt is counted and the next one pushed a lease ahead before any POST: a producer that
# dies mid-POST leaves the row due again after the lease, and a second producer never takes the
# same row meanwhile (SKIP LOCKED).
TAKE_DUE_WEBHOOKS_SQL = sa.text(
    "WITH due AS ("
    "  SELECT id FROM webhook_deliveries"
    "  WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= now()"
    "  ORDER BY next_attempt_at LIMIT :limit FOR UPDATE SKIP LOCKED)"
    " UPDATE webhook_deliveries w SET attempts = w.attempts + 1,"
    "   next_attempt_at = now() + make_interval(secs => :lease)"
    " FROM due WHERE w.id = due.id"
    " RETURNING w.id, w.job_id, w.status, w.url, w.payload, w.attempts"
)
DELIVERED_SQL = sa.text(
    "UPDATE webhook_deliveries SET delivered_at = now(), next_attempt_at = NULL,"
    " response_code = :code, last_error = NULL WHERE id = :id"
)
DELIVERY_FAILED_SQL = sa.text(
    "UPDATE webhook_deliveries SET last_error = :error, response_code = :code,"
    " next_attempt_at = :retry_at,"
    " gave_up_at = CASE WHEN CAST(:retry_at AS timestamptz) IS NULL THEN now() END"
    " WHERE id = :id AND delivered_at IS NULL"
)


def take_due_webhooks(conn: Connection, limit: int, lease_s: float) -> list[DueWebhook]:
    """Deliveries whose time has come, their attempt counted and their next attempt pushed
    ``lease_s`` ahead."""
    rows = conn.execute(TAKE_DUE_WEBHOOKS_SQL, {"limit": limit, "lease": lease_s})
    return [
        DueWebhook(r.id, r.job_id, r.status, r.url, r.payload, r.attempts)
        for r in sorted(rows, key=lambda r: r.id)
    ]


def record_webhook_delivered(conn: Connection, delivery_id: int, response_code: int) -> None:
    conn.execute(DELIVERED_SQL, {"id": delivery_id, "code": response_code})


def record_webhook_failed(
    conn: Connection,
    delivery_id: int,
    error: str,
    response_code: int | None,
    *,
    retry_at: datetime | None,
) -> None:
    """A POST that failed: due again at ``retry_at``, or given up when it is None."""
    line = " ".join(error.split())[:LAST_ERROR_CHARS] or "failed"
    conn.execute(
        DELIVERY_FAILED_SQL,
        {"id": delivery_id, "error": line, "code": response_code, "retry_at": retry_at},
    )
