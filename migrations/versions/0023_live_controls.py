"""Live controls: pause one rate key, kind or crawl, or change a key's or kind's limits, from
the CLI or the dashboard, without restarting the producer; every change audited.

- ``live_controls``: one row per rate key, kind or crawl an operator paused or limited
  (``scope``, ``name``): ``paused``, ``concurrency`` and ``per_minute`` (NULL: the settings
  file's, which stays the default), who changed it, when and why. A row that neither pauses nor
  limits is deleted. The producer reads the table at every cycle: a paused key's, kind's or
  crawl's pending jobs are not assigned from the next cycle on (those already running finish),
  and a live limit replaces the configured one for that key or kind.
- ``control_changes``: every change, append-only: who, when, what (``pause``, ``resume``,
  ``limit``, ``unlimit``), the row before and after, and why.

The producer's and reporting roles read both (the schema's default privileges); only the
owner and the producer role write them (operators' tools log in as one of those); a
consumer's role has no grant on either.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
SCOPES = ("rate_key", "kind", "crawl")  # common.store.operating.controls.Scope
CHANGES = ("pause", "resume", "limit", "unlimit")
NAME_MAX_CHARS = 200


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "live_controls",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("concurrency", sa.Integer),
        sa.Column("per_minute", sa.Integer),
        sa.Column("changed_by", sa.Text, nullable=False),
        sa.Column("changed_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("reason", sa.Text),
        sa.CheckConstraint(_in("scope", SCOPES), name="live_controls_scope_valid"),
        sa.CheckConstraint(
            f"length(name) BETWEEN 1 AND {NAME_MAX_CHARS}", name="live_controls_name_length"
        ),
        sa.CheckConstraint(
            "concurrency > 0 AND per_minute > 0", name="live_controls_limits_positive"
        ),
        sa.CheckConstraint(
            "scope <> 'crawl' OR (concurrency IS NULL AND per_minute IS NULL)",
            name="live_controls_crawls_pause_only",
        ),
        sa.CheckConstraint(
            "paused OR concurrency IS NOT NULL OR per_minute IS NOT NULL",
            name="live_controls_something",
        ),
        comment="Rate keys, kinds and crawls an operator paused or limited live (the producer"
        " reads it every cycle)",
    )
    op.create_table(
        "control_changes",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("changed_by", sa.Text, nullable=False),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("change", sa.Text, nullable=False),
        sa.Column("before", JSONB),
        sa.Column("after", JSONB),
        sa.Column("reason", sa.Text),
        sa.CheckConstraint(_in("change", CHANGES), name="control_changes_change_valid"),
        comment="Every live control change: who, when, what, before and after, why",
    )


def downgrade() -> None:
    op.drop_table("control_changes")
    op.drop_table("live_controls")
