"""Browser capability and prompt wake-ups.

- jobs.needs_browser (set at submit from the job's action), with a partial index of the pending
  jobs that need no browser: when no host's stack can take a browser job, the producer reads
  only those.
- hosts.browser_state / browser_reason / browser_retry_at: what the host's stack can do now, as
  its last probe reported it; host_load shows them.
- A NOTIFY on every INSERT statement into jobs (one per statement, not per row), so the producer
  wakes for new work at once instead of at its next interval.
- job_events.at and host_events.at from clock_timestamp(): the time of the change itself, not of
  its transaction's start, so the audit orders changes made in one transaction.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

CHANNEL_SUBMITTED = "scrapefleet_submitted"  # common.constants.CHANNEL_SUBMITTED
BROWSER_KINDS = "('fetch_page', 'screenshot')"  # the built-in browser actions of 0004's time

HOST_LOAD_0003 = """
        SELECT h.name AS host, h.state, h.capacity,
               count(j.id) FILTER (WHERE j.status = 'processing') AS running,
               count(j.id) FILTER (WHERE j.status = 'queued') AS queued,
               (SELECT count(*) FROM jobs c
                 WHERE c.host = h.name AND c.status = 'completed'
                   AND c.finished_at > now() - interval '1 hour') AS completed_last_hour,
               h.jobs_since_restart, h.jobs_since_boot, h.reported_running,
               h.last_seen_at, h.heartbeat_at, h.state_reason,
               h.probe_failures, h.last_probe_error"""
HOST_LOAD_FROM = """
        FROM hosts h
        LEFT JOIN jobs j ON j.host = h.name AND j.status IN ('queued', 'processing')
        GROUP BY h.name
        ORDER BY h.name
"""

NOTIFY_FUNCTION = f"""
CREATE FUNCTION jobs_notify_submitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL_SUBMITTED}', '');
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(
            table,
            sa.Column("needs_browser", sa.Boolean, nullable=False, server_default=sa.false()),
        )
    op.execute(f"UPDATE jobs SET needs_browser = true WHERE kind IN {BROWSER_KINDS}")
    op.create_index(
        "jobs_pending_no_browser_idx",
        "jobs",
        [sa.text("priority DESC"), "id"],
        postgresql_where=sa.text("status = 'pending' AND NOT needs_browser"),
    )
    op.add_column("hosts", sa.Column("browser_state", sa.Text))
    op.add_column("hosts", sa.Column("browser_reason", sa.Text))
    op.add_column("hosts", sa.Column("browser_retry_at", sa.DateTime(timezone=True)))
    # New columns go last: CREATE OR REPLACE VIEW may only append.
    op.execute(
        "CREATE OR REPLACE VIEW host_load AS"
        + HOST_LOAD_0003
        + ", h.browser_state AS browser, h.browser_reason, h.browser_retry_at"
        + HOST_LOAD_FROM
    )
    op.execute(NOTIFY_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobs"
        " FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_submitted()"
    )
    for table in ("job_events", "host_events"):
        op.alter_column(table, "at", server_default=sa.text("clock_timestamp()"))


def downgrade() -> None:
    for table in ("job_events", "host_events"):
        op.alter_column(table, "at", server_default=sa.text("now()"))
    op.execute("DROP TRIGGER jobs_notify_insert ON jobs")
    op.execute("DROP FUNCTION jobs_notify_submitted()")
    op.execute("DROP VIEW host_load")
    op.execute("CREATE VIEW host_load AS" + HOST_LOAD_0003 + HOST_LOAD_FROM)
    for column in ("browser_retry_at", "browser_reason", "browser_state"):
        op.drop_column("hosts", column)
    op.drop_index("jobs_pending_no_browser_idx", table_name="jobs")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "needs_browser")
