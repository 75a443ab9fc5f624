"""Crawls: jobs that make jobs (parent, depth, dedupe across a crawl).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
