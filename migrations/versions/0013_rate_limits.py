"""Rate keys: politeness limits per site and per kind.

- ``jobs.rate_key``: what a job loads, for its limits (common.jobs.rate_limits). Given at submit, or
  for the built-in URL actions the host of the payload's ``url``, set by the BEFORE INSERT
  trigger ``jobs_default_rate_key``, so that no insert path (submit, a spawned child, a
  hand-written INSERT) can forget it.
- Indexes for the producer's reads: pending jobs by rate key and by kind, each in the pending
  order (a key or kind with budget left is read for exactly that many jobs), and attempts by
  start time (the trailing minute's starts, whatever the history).
- ``rate_keys``: one row per key the producer slows down (the back-off factor, a pause until
  a Retry-After passed) or has a configured limit for (``named``; the row ``*`` holds the
  default for unnamed keys). The producer alone writes it; a consumer's role has no grant on it.
- ``rate_limits``: the operator's view, one row per key with work in flight, started in the
  last minute, pending, or a row in rate_keys.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
IN_FLIGHT = "status IN ('queued', 'processing')"
URL_KEYED_KINDS = (
    "fetch_page",
    "screenshot",
    "http_get",
    "crawl",
    "crawl_browser",
)  # common.jobs.rate_limits
RATE_KEYS_COMMENT = "Rate keys the producer slows down or has limits for (the row * : the default)"

# The host as urlsplit(url).hostname gives it: after the scheme and any user info (up to the
# last @), up to a port, path, query or fragment; lower-case, an IPv6 address without brackets.
DEFAULT_KEY_FUNCTION = r"""
CREATE FUNCTION jobs_default_rate_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rate_key := nullif(lower(btrim(substring(NEW.payload ->> 'url'
        FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#]*@)?(\[[^]/?#]*\]|[^:/?#]*)'), '[]')), '');
    RETURN NEW;
END
$$
"""

RATE_LIMITS_VIEW = f"""
CREATE VIEW rate_limits AS
WITH activity AS (
    SELECT rate_key AS key,
           count(*) FILTER (WHERE {IN_FLIGHT}) AS in_flight,
           count(*) FILTER (WHERE started_at > now() - interval '60 seconds')
               AS started_last_minute
    FROM jobs
    WHERE rate_key IS NOT NULL
      AND ({IN_FLIGHT} OR started_at > now() - interval '60 seconds')
    GROUP BY rate_key
), waiting AS (
    SELECT rate_key AS key, count(*) AS pending
    FROM jobs WHERE status = 'pending' AND rate_key IS NOT NULL
    GROUP BY rate_key
), keys AS (
    SELECT key FROM activity UNION SELECT key FROM waiting
    UNION SELECT key FROM rate_keys WHERE key <> '*'
)
SELECT k.key,
       coalesce(a.in_flight, 0) AS in_flight,
       coalesce(a.started_last_minute, 0) AS started_last_minute,
       coalesce(w.pending, 0) AS pending,
       CASE WHEN r.named THEN r.concurrency ELSE d.concurrency END AS concurrency_limit,
       CASE WHEN r.named THEN r.per_minute ELSE d.per_minute END AS per_minute_limit,
       coalesce(r.factor, 1) AS factor,
       CASE WHEN r.paused_until > now() THEN r.paused_until END AS paused_until
FROM keys k
LEFT JOIN activity a ON a.key = k.key
LEFT JOIN waiting w ON w.key = k.key
LEFT JOIN rate_keys r ON r.key = k.key
LEFT JOIN rate_keys d ON d.key = '*'
ORDER BY k.key
"""


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("rate_key", sa.Text))
    op.create_index(
        "jobs_pending_by_rate_key_idx",
        "jobs",
        ["rate_key", sa.text("priority DESC"), "id"],
        postgresql_where=sa.text("status = 'pending' AND rate_key IS NOT NULL"),
    )
    op.create_index(
        "jobs_pending_by_kind_idx",
        "jobs",
        ["kind", sa.text("priority DESC"), "id"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "jobs_started_at_idx",
        "jobs",
        ["started_at"],
        postgresql_where=sa.text("started_at IS NOT NULL"),
    )
    op.execute(DEFAULT_KEY_FUNCTION)
    kinds = ", ".join(f"'{k}'" for k in URL_KEYED_KINDS)
    op.execute(
        "CREATE TRIGGER jobs_default_rate_key BEFORE INSERT ON jobs FOR EACH ROW"
        f" WHEN (NEW.rate_key IS NULL AND NEW.kind IN ({kinds}))"
        " EXECUTE FUNCTION jobs_default_rate_key()"
    )
    op.create_table(
        "rate_keys",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("named", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("concurrency", sa.Integer),
        sa.Column("per_minute", sa.Integer),
        sa.Column("factor", sa.Float, nullable=False, server_default="1"),
        sa.Column("paused_until", TS),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("factor > 0 AND factor <= 1", name="rate_keys_factor_range"),
        sa.CheckConstraint("concurrency > 0 AND per_minute > 0", name="rate_keys_limits_positive"),
        comment=RATE_KEYS_COMMENT,
    )
    op.execute(RATE_LIMITS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW rate_limits")
    op.drop_table("rate_keys")
    op.execute("DROP TRIGGER jobs_default_rate_key ON jobs")
    op.execute("DROP FUNCTION jobs_default_rate_key()")
    op.drop_index("jobs_started_at_idx", "jobs")
    op.drop_index("jobs_pending_by_kind_idx", "jobs")
    op.drop_index("jobs_pending_by_rate_key_idx", "jobs")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "rate_key")
