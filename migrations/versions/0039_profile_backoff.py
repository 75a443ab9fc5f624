"""A blocked profile's cool-down grows with its blocks in a row, as a proxy's does:
``profiles.consecutive_blocks`` (blocks since its last job that completed), which a consumer
raises after a block and clears after a success, for its own host's profiles only (the row
policies of 0011 stand; the column is added to its role's UPDATE grant here and by
`scrapefleet db grant`).

Revision ID: 0039
Revises: 0038
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None

GRANT_TO_CONSUMERS = """
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT role_name FROM db_roles JOIN pg_roles ON rolname = role_name
             WHERE duty = 'consumer' LOOP
        EXECUTE format('GRANT UPDATE (consecutive_blocks) ON profiles TO %I', r.role_name);
    END LOOP;
END $$
"""


def upgrade() -> None:
    op.add_column(
        "profiles",
        sa.Column("consecutive_blocks", sa.Integer, nullable=False, server_default="0"),
    )
    op.execute(GRANT_TO_CONSUMERS)


def downgrade() -> None:
    op.drop_column("profiles", "consecutive_blocks")
