"""host_load shows why a host is sick: consecutive probe failures and the last probe error.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS_0001 = """
        SELECT h.name AS host, h.state, h.capacity,
               count(j.id) FILTER (WHERE j.status = 'processing') AS running,
               count(j.id) FILTER (WHERE j.status = 'queued') AS queued,
               (SELECT count(*) FROM jobs c
                 WHERE c.host = h.name AND c.status = 'completed'
                   AND c.finished_at > now() - interval '1 hour') AS completed_last_hour,
               h.jobs_since_restart, h.jobs_since_boot, h.reported_running,
               h.last_seen_at, h.heartbeat_at, h.state_reason"""
FROM = """
        FROM hosts h
        LEFT JOIN jobs j ON j.host = h.name AND j.status IN ('queued', 'processing')
        GROUP BY h.name
        ORDER BY h.name
"""


def upgrade() -> None:
    # New columns go last: CREATE OR REPLACE VIEW may only append.
    op.execute(
        "CREATE OR REPLACE VIEW host_load AS"
        + COLUMNS_0001
        + ", h.probe_failures, h.last_probe_error"
        + FROM
    )


def downgrade() -> None:
    op.execute("DROP VIEW host_load")
    op.execute("CREATE VIEW host_load AS" + COLUMNS_0001 + FROM)
