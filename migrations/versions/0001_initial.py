"""Initial schema: jobs, hosts, the audit tables, the trigger that fills job_events, the views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
IN_FLIGHT = "status IN ('queued', 'processing')"
UNFINISHED = "status IN ('pending', 'queued', 'processing')"

AUDIT_FUNCTION = r"""
CREATE FUNCTION jobs_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A message set by the writer for this transaction wins; otherwise an attempt that ended in
    -- an error is summarised by the last line of its traceback.
    INSERT INTO job_events (job_id, from_status, to_status, host, message)
    VALUES (
        NEW.id,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END,
        NEW.status,
        CASE WHEN TG_OP = 'UPDATE' THEN coalesce(NEW.host, OLD.host) ELSE NEW.host END,
        coalesce(
            nullif(current_setting('scrapefleet.audit_message', true), ''),
            CASE WHEN TG_OP = 'UPDATE' AND OLD.status = 'processing'
                      AND NEW.status IN ('pending', 'failed') AND NEW.last_error IS NOT NULL
                 THEN (regexp_match(NEW.last_error, '([^\n]+)\s*$'))[1] END
        )
    );
    RETURN NULL;
END
$$
"""

VIEWS = {
    "job_status_counts": """
        SELECT s.status, count(j.id) AS jobs
        FROM unnest(ARRAY['pending', 'queued', 'processing', 'completed', 'failed', 'cancelled'])
             WITH ORDINALITY AS s(status, ord)
        LEFT JOIN jobs j ON j.status = s.status
        GROUP BY s.status, s.ord
        ORDER BY s.ord
    """,
    "host_load": """
        SELECT h.name AS host, h.state, h.capacity,
               count(j.id) FILTER (WHERE j.status = 'processing') AS running,
               count(j.id) FILTER (WHERE j.status = 'queued') AS queued,
               (SELECT count(*) FROM jobs c
                 WHERE c.host = h.name AND c.status = 'completed'
                   AND c.finished_at > now() - interval '1 hour') AS completed_last_hour,
               h.jobs_since_restart, h.jobs_since_boot, h.reported_running,
               h.last_seen_at, h.heartbeat_at, h.state_reason
        FROM hosts h
        LEFT JOIN jobs j ON j.host = h.name AND j.status IN ('queued', 'processing')
        GROUP BY h.name
        ORDER BY h.name
    """,
    "recent_failures": r"""
        SELECT id AS job_id, kind, host, attempts, max_attempts, finished_at,
               (regexp_match(last_error, '([^\n]+)\s*$'))[1] AS error,
               artifacts ->> 'screenshot' AS screenshot,
               artifacts ->> 'html' AS html,
               artifacts ->> 'traceback' AS traceback_file
        FROM jobs
        WHERE status = 'failed' AND finished_at > now() - interval '7 days'
        ORDER BY finished_at DESC
    """,
    "throughput_per_hour": """
        SELECT date_trunc('hour', finished_at) AS hour,
               count(*) FILTER (WHERE status = 'completed') AS completed,
               count(*) FILTER (WHERE status = 'failed') AS failed
        FROM jobs
        WHERE finished_at > now() - interval '7 days'
        GROUP BY 1
        ORDER BY 1 DESC
    """,
}


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("host", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("not_before", TS),
        sa.Column("last_error", sa.Text),
        sa.Column("result", JSONB),
        sa.Column("artifacts", JSONB),
        sa.Column("dedupe_key", sa.Text),
        sa.Column("lock_key", sa.Text),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("queued_at", TS),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("heartbeat_at", TS),
        sa.CheckConstraint(
            "status IN ('pending', 'queued', 'processing', 'completed', 'failed', 'cancelled')",
            name="jobs_status_valid",
        ),
        sa.CheckConstraint("max_attempts >= 1", name="jobs_max_attempts_positive"),
        sa.CheckConstraint("attempts >= 0", name="jobs_attempts_not_negative"),
    )
    op.create_index(
        "jobs_pending_idx",
        "jobs",
        [sa.text("priority DESC"), "id"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "jobs_in_flight_by_host_idx",
        "jobs",
        ["host", "status"],
        postgresql_where=sa.text(IN_FLIGHT),
    )
    op.create_index(
        "jobs_dedupe_key_unfinished_key",
        "jobs",
        ["dedupe_key"],
        unique=True,
        postgresql_where=sa.text(f"dedupe_key IS NOT NULL AND {UNFINISHED}"),
    )
    op.create_index(
        "jobs_lock_key_in_flight_key",
        "jobs",
        ["lock_key"],
        unique=True,
        postgresql_where=sa.text(f"lock_key IS NOT NULL AND {IN_FLIGHT}"),
    )
    op.create_index(
        "jobs_finished_at_idx",
        "jobs",
        ["finished_at"],
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )

    op.create_table(
        "hosts",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("capacity", sa.Integer, nullable=False, server_default="6"),
        sa.Column("state", sa.Text, nullable=False, server_default="active"),
        sa.Column("state_reason", sa.Text),
        sa.Column("state_changed_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("address", sa.Text),
        sa.Column("ssh_port", sa.Integer, nullable=False, server_default="22"),
        sa.Column("ssh_user", sa.Text, nullable=False, server_default="scrapefleet"),
        sa.Column("ssh_key_file", sa.Text),
        sa.Column("known_hosts_file", sa.Text),
        sa.Column("boot_id", sa.Text),
        sa.Column("jobs_since_restart", sa.Integer, nullable=False, server_default="0"),
        sa.Column("jobs_since_boot", sa.Integer, nullable=False, server_default="0"),
        sa.Column("jobs_total", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("reported_running", sa.Integer),
        sa.Column("memory_available_bytes", sa.BigInteger),
        sa.Column("probe_failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_probe_error", sa.Text),
        sa.Column("last_seen_at", TS),
        sa.Column("heartbeat_at", TS),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint(
            "state IN ('active', 'draining', 'restarting', 'rebooting', 'offline', 'disabled')",
            name="hosts_state_valid",
        ),
        sa.CheckConstraint("capacity BETWEEN 1 AND 64", name="hosts_capacity_range"),
    )

    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("from_status", sa.Text),
        sa.Column("to_status", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("message", sa.Text),
    )
    op.create_index("job_events_job_id_idx", "job_events", ["job_id"])

    op.create_table(
        "host_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("from_state", sa.Text),
        sa.Column("to_state", sa.Text),
        sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("message", sa.Text),
        sa.Column("details", JSONB),
    )
    op.create_index("host_events_host_at_idx", "host_events", ["host", "at"])

    op.execute(AUDIT_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_audit_insert AFTER INSERT ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION jobs_audit()"
    )
    op.execute(
        "CREATE TRIGGER jobs_audit_status AFTER UPDATE OF status ON jobs FOR EACH ROW "
        "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION jobs_audit()"
    )
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    op.execute("COMMENT ON TABLE jobs IS 'One row per job; status is its place in the flow'")
    op.execute("COMMENT ON TABLE job_events IS 'One row per job status change (by trigger)'")
    op.execute("COMMENT ON TABLE hosts IS 'Consumer hosts: capacity, state, counters, probe'")
    op.execute("COMMENT ON TABLE host_events IS 'Host state changes, restarts, reboots'")
    op.execute("COMMENT ON VIEW job_status_counts IS 'How many jobs in each status'")
    op.execute("COMMENT ON VIEW host_load IS 'Per host: state, running, queued, done last hour'")
    op.execute("COMMENT ON VIEW recent_failures IS 'Failed jobs of the last 7 days, newest first'")
    op.execute(
        "COMMENT ON VIEW throughput_per_hour IS 'Completed and failed jobs per hour, 7 days'"
    )


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute("DROP TABLE IF EXISTS host_events, job_events, hosts, jobs")
    op.execute("DROP FUNCTION IF EXISTS jobs_audit()")
