"""Operator features: job callback URLs and their webhook deliveries, the jobs archive, the
fleet-wide pause switch.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

# A trigger of its own rather than a change to jobs_audit: every path that finishes a job (the
# consumer, the rescue, a hand-written UPDATE at a psql prompt) enqueues the delivery, and the
# audit function stays as 0001 made it. ON CONFLICT: a job retried by an operator that fails
# again has already announced 'failed' once; receivers dedupe on (job_id, status) anyway.
WEBHOOK_FUNCTION = r"""
CREATE FUNCTION jobs_webhook_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (job_id, status, url, payload)
    VALUES (
        NEW.id,
        NEW.status,
        NEW.callback_url,
        jsonb_build_object(
            'job_id', NEW.id,
            'status', NEW.status,
            'kind', NEW.kind,
            'attempts', NEW.attempts,
            'finished_at',
                to_char(coalesce(NEW.finished_at, now()) AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
        ) || CASE WHEN NEW.status = 'completed'
                  THEN jsonb_build_object('result', NEW.result)
                  ELSE jsonb_build_object('error', NEW.last_error) END
    )
    ON CONFLICT (job_id, status) DO NOTHING;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("callback_url", sa.Text))

    op.create_table(
        "jobs_archive",
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("not_before", TS),
        sa.Column("last_error", sa.Text),
        sa.Column("result", JSONB),
        sa.Column("artifacts", JSONB),
        sa.Column("dedupe_key", sa.Text),
        sa.Column("lock_key", sa.Text),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("queued_at", TS),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("heartbeat_at", TS),
        sa.Column("callback_url", sa.Text),
        sa.Column("archived_at", TS, nullable=False, server_default=sa.text("now()")),
    )
    op.create_index("jobs_archive_finished_at_idx", "jobs_archive", ["finished_at"])

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", TS, server_default=sa.text("now()")),
        sa.Column("delivered_at", TS),
        sa.Column("gave_up_at", TS),
        sa.Column("last_error", sa.Text),
        sa.Column("response_code", sa.Integer),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.UniqueConstraint("job_id", "status", name="webhook_deliveries_job_status_key"),
    )
    op.create_index(
        "webhook_deliveries_due_idx",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("next_attempt_at IS NOT NULL"),
    )

    op.create_table(
        "fleet_control",
        sa.Column("id", sa.Boolean, primary_key=True, server_default=sa.text("true")),
        sa.Column("assignment_paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("changed_by", sa.Text),
        sa.Column("changed_at", TS),
        sa.Column("reason", sa.Text),
        sa.CheckConstraint("id", name="fleet_control_single_row"),
    )
    op.execute("INSERT INTO fleet_control (id) VALUES (true)")

    op.execute(WEBHOOK_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_webhook_enqueue AFTER UPDATE OF status ON jobs FOR EACH ROW"
        " WHEN (NEW.callback_url IS NOT NULL AND NEW.status IN ('completed', 'failed')"
        "       AND OLD.status IS DISTINCT FROM NEW.status)"
        " EXECUTE FUNCTION jobs_webhook_enqueue()"
    )
    op.execute("COMMENT ON TABLE jobs_archive IS 'Finished jobs past retention, moved out of jobs'")
    op.execute(
        "COMMENT ON TABLE webhook_deliveries IS"
        " 'Webhook POSTs of finished jobs: one per job and status, with delivery state'"
    )
    op.execute(
        "COMMENT ON TABLE fleet_control IS"
        " 'Fleet-wide operator switches (one row): assignment paused, by whom, why'"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS jobs_webhook_enqueue ON jobs")
    op.execute("DROP FUNCTION IF EXISTS jobs_webhook_enqueue()")
    op.execute("DROP TABLE IF EXISTS fleet_control, webhook_deliveries, jobs_archive")
    op.drop_column("jobs", "callback_url")
