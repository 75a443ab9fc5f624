"""Kinds as host capabilities: ``hosts.kinds``, the action kinds a host's consumer can run.

Each consumer reports the kinds of its registry (built-ins, its ``actions`` setting, installed
packages' entry points) in its status document, each with the version of the package that
provides it; the producer's probe validates the report and stores it here as a JSON object
(kind -> version or null). NULL: not reported (a consumer that predates the field, or a host
not probed yet), read as "runs any kind". The planner places a job only on an active host that
runs its kind, and readers say why a job of a kind no active host runs is waiting.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# A report is bounded when parsed (common.status.document); this is the database's own guard.
MAX_KINDS_BYTES = 64 * 1024


def upgrade() -> None:
    op.add_column("hosts", sa.Column("kinds", JSONB))
    op.create_check_constraint(
        "hosts_kinds_object",
        "hosts",
        f"kinds IS NULL OR (jsonb_typeof(kinds) = 'object'"
        f" AND pg_column_size(kinds) <= {MAX_KINDS_BYTES})",
    )


def downgrade() -> None:
    op.drop_constraint("hosts_kinds_object", "hosts")
    op.drop_column("hosts", "kinds")
