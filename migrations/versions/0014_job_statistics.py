"""refresh_job_statistics(): the planner's view of ``jobs`` brought up to date after a big submit.

The producer's hot statements (the pending read, the assignment) are planned from the table's
statistics. Right after many jobs arrive in a table whose statistics say there are none pending
(a fresh table, or one of finished jobs), the planner reads EVERY pending row and sorts them
each cycle, and the assignment scans them all again, until autovacuum's next analyze, a minute
or more later: 3 ms a cycle at 20,000 pending jobs, more with more. ``insert_jobs`` calls this
after a large insert, in the submit's transaction (ANALYZE counts that transaction's own new
rows; the statistics are in place when its jobs are). It runs as the owner (SECURITY DEFINER:
only the owner may ANALYZE), for the columns those plans depend on, and refuses a consumer's
role: a host must not be able to load the database with it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

import importlib

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")

REFRESH_FUNCTION = """
CREATE FUNCTION refresh_job_statistics() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF db_role_host(session_user) IS NOT NULL THEN
        RAISE EXCEPTION 'refresh_job_statistics: not for a consumer host''s role'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    ANALYZE jobs (status, priority, kind, rate_key, lock_key, needs_browser, host);
END
$$
"""


def upgrade() -> None:
    op.execute(REFRESH_FUNCTION)
    _ROLES._pin_search_path("refresh_job_statistics()")


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS refresh_job_statistics()")
