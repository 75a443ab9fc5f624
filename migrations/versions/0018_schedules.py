"""Schedules: recurring submissions fired by the leading producer.

- ``schedule_defs``: one row per schedule (a cron in a time zone, or an interval from its
  ``created_at``; the validated jobs it submits,
  its catch-up and overlap policies, paused or not) and its next slot, ``next_run_at``. The
  producer that fires a slot moves ``next_run_at`` past it in a conditional UPDATE (``WHERE
  next_run_at = <the slot it read>``): of two producers, the second finds the row moved and
  fires nothing.
- ``schedule_runs``: one row per slot fired, skipped or run by hand, keyed (schedule, slot), with
  the ids of the jobs it inserted: the database keeps a period to one run whoever fires it.
- ``schedules``: the view for a psql prompt: each schedule's next slot, its last run (slot, when
  it fired, how late, its outcome) and how that run's jobs ended, archived ones included.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

SCHEDULES_VIEW = """
CREATE VIEW schedules AS
SELECT d.name, d.cron, d.every_s, d.timezone, d.paused, d.catch_up, d.overlap, d.next_run_at,
       r.slot AS last_slot, r.fired_at AS last_fired_at, r.outcome AS last_outcome,
       round(extract(epoch FROM r.fired_at - r.slot)::numeric, 1) AS last_lag_s,
       coalesce(cardinality(r.job_ids), 0) AS last_jobs,
       coalesce(j.completed, 0) AS last_completed,
       coalesce(j.failed, 0) AS last_failed,
       coalesce(j.unfinished, 0) AS last_unfinished,
       d.jobs, d.created_at, d.updated_at
FROM schedule_defs d
LEFT JOIN LATERAL (
    SELECT * FROM schedule_runs WHERE schedule_id = d.id ORDER BY slot DESC LIMIT 1
) r ON true
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS failed,
           count(*) FILTER (WHERE status IN ('pending', 'queued', 'processing')) AS unfinished
    FROM (SELECT status FROM jobs WHERE id = ANY (r.job_ids)
          UNION ALL
          SELECT status FROM jobs_archive WHERE id = ANY (r.job_ids)) run_jobs
) j ON true
"""


def upgrade() -> None:
    op.create_table(
        "schedule_defs",
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("name", sa.Text, nullable=False, unique=True),
        sa.Column("cron", sa.Text),
        sa.Column("every_s", sa.Float),
        sa.Column("timezone", sa.Text, nullable=False, server_default="UTC"),
        sa.Column("jobs", JSONB, nullable=False),
        sa.Column("catch_up", sa.Text, nullable=False, server_default="once"),
        sa.Column("overlap", sa.Text, nullable=False, server_default="allow"),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("next_run_at", TS, nullable=False),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("catch_up IN ('once', 'skip')", name="schedule_defs_catch_up"),
        sa.CheckConstraint("overlap IN ('allow', 'skip')", name="schedule_defs_overlap"),
        sa.CheckConstraint("jsonb_typeof(jobs) = 'array'", name="schedule_defs_jobs_array"),
        # A cron or an interval (anchored at created_at), never both.
        sa.CheckConstraint(
            "(cron IS NULL) <> (every_s IS NULL) AND (every_s IS NULL OR every_s >= 1)",
            name="schedule_defs_cron_or_every",
        ),
        comment="Recurring submissions: a cron in a time zone, the jobs, the next slot",
    )
    op.create_table(
        "schedule_runs",
        sa.Column(
            "schedule_id",
            sa.BigInteger,
            sa.ForeignKey("schedule_defs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("slot", TS, primary_key=True),
        sa.Column("fired_at", TS, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("job_ids", sa.ARRAY(sa.BigInteger), nullable=False, server_default="{}"),
        sa.Column("missed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("fired_by", sa.Text),
        sa.CheckConstraint(
            "outcome IN ('fired', 'manual', 'skipped_missed', 'skipped_overlap')",
            name="schedule_runs_outcome",
        ),
        comment="Each slot of a schedule: fired (its jobs), skipped (why) or run by hand",
    )
    op.execute(SCHEDULES_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW schedules")
    op.drop_table("schedule_runs")
    op.drop_table("schedule_defs")
