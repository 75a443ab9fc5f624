"""Profiles: persistent browser identities and the hosts that hold them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
