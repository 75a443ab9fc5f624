"""Webhook deliveries: taken under a lease, then recorded as delivered, due again or given up.

The rows themselves come from the ``jobs_webhook_enqueue`` trigger, so no path that finishes a
job can forget one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common.store.records import DueWebhook
from scrapefleet.common.store.sql_text import statement

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
# same row meanwhile (SKIP LOCKED). Only rows of receivers with room are taken: those at their
# cap (``:full``) are not even looked at, the others get at most ``:per_receiver`` less what
# they have in flight (``:busy``/``:busy_counts``), so one slow receiver's backlog never holds
# a row of another receiver back. Rows are taken in their order while their bodies fit in
# ``:bytes_left`` (what the sender's memory budget has left after the POSTs in flight), and
# the first one always when nothing is in flight, so that one large body is never stuck. Rows
# looked at and not taken are left as they were.
TAKE_DUE_WEBHOOKS_SQL = statement(
    """
WITH candidates AS (
  -- A delivery's receiver: its URL's host and port without userinfo, lower case (the sender
  -- caps its POSTs in flight per receiver).
  SELECT id, next_attempt_at, payload_bytes,
    lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)')) AS receiver
  FROM webhook_deliveries
  WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= now()
    AND lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)'))
      <> ALL(CAST(:full AS text[]))
  ORDER BY next_attempt_at LIMIT :scan FOR UPDATE SKIP LOCKED
), busy AS (
  SELECT * FROM unnest(CAST(:busy AS text[]), CAST(:busy_counts AS int[]))
    AS b(receiver, in_flight)
), ranked AS (
  -- Each candidate's place in its receiver's queue, after the POSTs it has in flight.
  SELECT c.id, c.next_attempt_at, c.payload_bytes,
    row_number() OVER (PARTITION BY c.receiver ORDER BY c.next_attempt_at, c.id)
      + coalesce(b.in_flight, 0) AS slot
  FROM candidates c LEFT JOIN busy b ON b.receiver = c.receiver
), room AS (
  SELECT id, next_attempt_at,
    sum(payload_bytes) OVER (ORDER BY next_attempt_at, id) AS running_bytes,
    row_number() OVER (ORDER BY next_attempt_at, id) AS place
  FROM ranked WHERE slot <= :per_receiver
), chosen AS (
  SELECT id FROM room
  WHERE running_bytes <= :bytes_left OR (place = 1 AND :nothing_in_flight)
  ORDER BY next_attempt_at, id LIMIT :limit
)
UPDATE webhook_deliveries w SET attempts = w.attempts + 1,
  next_attempt_at = now() + make_interval(secs => :lease)
FROM chosen
WHERE w.id = chosen.id
RETURNING w.id, w.job_id, w.status, w.url, w.payload, w.attempts, w.payload_bytes,
  lower(substring(w.url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)')) AS receiver
"""
)
DELIVERED_SQL = statement(
    """
UPDATE webhook_deliveries SET delivered_at = now(), next_attempt_at = NULL,
  response_code = :code, last_error = NULL
WHERE id = :id
"""
)
# No retry time: given up.
DELIVERY_FAILED_SQL = statement(
    """
UPDATE webhook_deliveries SET last_error = :error, response_code = :code,
  next_attempt_at = :retry_at,
  gave_up_at = CASE WHEN CAST(:retry_at AS timestamptz) IS NULL THEN now() END
WHERE id = :id AND delivered_at IS NULL
"""
)


def take_due_webhooks(
    conn: Connection,
    limit: int,
    lease_s: float,
    *,
    in_flight: Mapping[str, int] | None = None,
    per_receiver: int = 1_000_000,
    scan: int = 500,
    bytes_left: int = 2**62,
) -> list[DueWebhook]:
    """Up to ``limit`` deliveries whose time has come, at most ``per_receiver`` in flight per
    receiver counting ``in_flight`` (receiver -> POSTs running), whose bodies together fit in
    ``bytes_left`` (the first always, when nothing is in flight), their attempt counted and
    their next attempt pushed ``lease_s`` ahead."""
    busy = {r: n for r, n in (in_flight or {}).items() if n > 0}
    rows = conn.execute(
        TAKE_DUE_WEBHOOKS_SQL,
        {
            "limit": limit,
            "lease": lease_s,
            "scan": scan,
            "per_receiver": per_receiver,
            "full": [r for r, n in busy.items() if n >= per_receiver],
            "busy": list(busy),
            "busy_counts": list(busy.values()),
            "bytes_left": max(bytes_left, 0),
            "nothing_in_flight": not busy,
        },
    )
    return [
        DueWebhook(
            r.id, r.job_id, r.status, r.url, r.payload, r.attempts, r.receiver, r.payload_bytes
        )
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
