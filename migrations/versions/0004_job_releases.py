"""jobs.releases: how often a failing host handed a job back without using an attempt.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("releases", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "releases")
