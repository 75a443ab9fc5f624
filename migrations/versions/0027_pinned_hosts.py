"""Pins that hold: ``jobs.pinned_host``, the host a job was pinned to at submit
(``scrapefleet submit --host``).

A pinned job used to be queued on its host and nothing more: once that host handed it back (a
release, a requeue of a draining or unavailable host's jobs), it was pending like any other and
the producer could assign it anywhere, so a canary could complete on a host it was not meant to
prove. The column outlives every hand-back (only a submit sets it; a consumer's role has no
grant on it: its column grants are listed in common.ops.db_grant), and the producer assigns a
pinned job to that host only: while the host cannot take it, the job waits, pending.

Revision ID: 0027
Revises: 0025
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Archived with the job, as every column of jobs is (common.db.job_tables.jobs_archive).
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("pinned_host", sa.Text))


def downgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "pinned_host")
