"""Rate keys: politeness limits per site and per kind.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
