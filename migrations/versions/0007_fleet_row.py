"""Producers say they are alive: one ``producers`` row per producer process, and the ``fleet``
view, one row answering "is anything assigning, and since when?".

One row per process rather than one shared row: the leader and each standby write only their
own row (one upsert per interval), so a deposed leader and its successor never overwrite each
other, and the standbys are listed by the same table. The pause stays in fleet_control, the
operators' switch; the view joins it, so there is one place that says whether it is paused.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
COMMENT = "One row per producer process: role, version, last cycle (leader), last seen"

# The staleness rule of common.reads.producer_status (common.constants.PRODUCER_STALE_INTERVALS and
# PRODUCER_STALE_MIN_S), spelled as it is today; a test holds the two to each other.
FRESH = "{seen} > now() - make_interval(secs => greatest(3 * {interval}, 10))"

FLEET_VIEW = f"""
CREATE VIEW fleet AS
SELECT l.name AS leader, l.host AS leader_host, l.pid AS leader_pid, l.version, l.role,
       l.last_cycle_at, l.last_cycle_duration_s,
       coalesce(l.role <> 'stopped'
                AND {FRESH.format(seen="l.last_cycle_at", interval="l.interval_s")}, false)
           AS producer_up,
       (SELECT count(*) FROM producers s WHERE s.role = 'standby'
           AND {FRESH.format(seen="s.last_seen_at", interval="s.interval_s")}) AS standbys_up,
       coalesce(c.assignment_paused, false) AS assignment_paused,
       c.changed_by AS pause_changed_by, c.changed_at AS pause_changed_at, c.reason AS pause_reason
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT * FROM producers WHERE last_cycle_at IS NOT NULL
                   ORDER BY last_cycle_at DESC LIMIT 1) AS l ON true
LEFT JOIN fleet_control AS c ON true
"""


def upgrade() -> None:
    op.create_table(
        "producers",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("webhook_secret_set", sa.Boolean, nullable=False),
        sa.Column("started_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_seen_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_cycle_at", TS),
        sa.Column("last_cycle_duration_s", sa.Float),
        sa.CheckConstraint("role IN ('leader', 'standby', 'stopped')", name="producers_role_valid"),
        comment=COMMENT,
    )
    op.execute(FLEET_VIEW)
    op.execute(
        "COMMENT ON VIEW fleet IS 'The leading producer, whether it is up, the pause switch'"
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS fleet")
    op.drop_table("producers")
