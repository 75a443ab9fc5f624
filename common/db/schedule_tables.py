"""The schedules' tables: ``schedule_defs`` (a recurring submission: its cron or interval, its
jobs, its next slot) and ``schedule_runs`` (each slot fired, skipped or run by hand, fired once
whichever producer fires it).

Alembic migrations create them; tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common.db.schema_base import TS, metadata

# ---------------------------------------------------------------- migration 0018: schedules

# One row per recurring submission: its cron in a time zone, the validated jobs it submits at
# each slot, and the next slot, which the firing producer moves forward in the same conditional
# UPDATE that claims the slot (common.store.operating.schedules). Written by the CLI and the
# producer.
schedule_defs = sa.Table(
    "schedule_defs",
    metadata,
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

# One row per slot a schedule ran, skipped or was run by hand: the primary key is the database's
# guarantee that a period is fired once, whichever producer fires it.
schedule_runs = sa.Table(
    "schedule_runs",
    metadata,
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
