"""Error classes on attempts (transient, permanent, rate_limited, blocked).

- ``jobs.error_class``: the class of the job's last failed (or blocked) attempt
  (common.actions.error_classes); ``recent_failures`` shows it and ``failure_groups`` groups by it.
- ``jobs.blocks``: times a site blocked the job. A blocked attempt goes back to pending without
  using an attempt, like a release, with a bound of its own: past ``max_blocks_per_job`` the
  job fails with class ``blocked``.
- ``jobs.blocked_on_host``: the host the job was last blocked on, so that the producer can
  prefer another one for its next try.
- ``job_events.error_class``: each attempt's own class, on the row that ends it (processing ->
  pending or failed), written by ``jobs_audit`` from the job's class. A release (the host's
  fault: its message says "released...", "interrupted:..." or "rescued:...", as the outcome
  views of 0009 read it) ended no failed attempt and gets none. The function stays SECURITY
  DEFINER with its search path pinned (0008).

A consumer's role writes these columns of its own jobs only (its column grants, scrapefleet db
grant, and the row policies of 0008 as for every other column it writes).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ERROR_CLASSES = (
    "transient",
    "permanent",
    "rate_limited",
    "blocked",
)  # common.actions.error_classes
CLASS_CHECK = "error_class IN ({})".format(", ".join(f"'{c}'" for c in ERROR_CLASSES))
GROUPS_COMMENT = "Failed jobs of 7 days grouped by kind, error class and masked error"

# The trigger function of 0001 and the views of 0009, which this one extends and its downgrade
# restores; 0008's way of pinning a definer function's search path.
_INITIAL = importlib.import_module("scrapefleet.migrations.versions.0001_initial")
_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")
_PROGRESS_VIEWS = importlib.import_module("scrapefleet.migrations.versions.0009_progress_views")
LAST_LINE = _PROGRESS_VIEWS.LAST_LINE
MASKED = _PROGRESS_VIEWS.MASKED

FAILURE_GROUPS = f"""
CREATE VIEW failure_groups AS
SELECT j.kind, j.error_class, {MASKED} AS error, count(*) AS jobs,
       max(j.finished_at) AS last_at,
       (array_agg(j.id ORDER BY j.finished_at DESC))[1] AS example_job,
       (array_agg({LAST_LINE} ORDER BY j.finished_at DESC))[1] AS example_error
FROM jobs j
WHERE j.status = 'failed' AND j.finished_at > now() - interval '7 days'
GROUP BY j.kind, j.error_class, {MASKED}
ORDER BY count(*) DESC
"""

AUDIT_FUNCTION = r"""
CREATE OR REPLACE FUNCTION jobs_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    message text := nullif(current_setting('scrapefleet.audit_message', true), '');
    attempt_ended boolean := TG_OP = 'UPDATE' AND OLD.status = 'processing'
        AND NEW.status IN ('pending', 'failed');
BEGIN
    -- A message set by the writer for this transaction wins; otherwise an attempt that ended in
    -- an error is summarised by the last line of its traceback. An attempt that failed (not one
    -- its host handed back) carries its class.
    INSERT INTO job_events (job_id, from_status, to_status, host, message, error_class)
    VALUES (
        NEW.id,
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END,
        NEW.status,
        CASE WHEN TG_OP = 'UPDATE' THEN coalesce(NEW.host, OLD.host) ELSE NEW.host END,
        coalesce(
            message,
            CASE WHEN attempt_ended AND NEW.last_error IS NOT NULL
                 THEN (regexp_match(NEW.last_error, '([^\n]+)\s*$'))[1] END
        ),
        CASE WHEN attempt_ended
                  AND NOT coalesce(message ~ '^(released|interrupted:|rescued:)', false)
             THEN NEW.error_class END
    );
    RETURN NULL;
END
$$
"""


def _audit_function(definition: str) -> None:
    """Replace jobs_audit; a replacement resets its SECURITY DEFINER and search path (0008)."""
    op.execute(definition)
    op.execute("ALTER FUNCTION jobs_audit() SECURITY DEFINER")
    _ROLES._pin_search_path("jobs_audit()")


# 0009's columns, then the class (CREATE OR REPLACE VIEW may only append columns).
RECENT_FAILURES_COLUMNS = (
    ",\n               artifacts ->> 'network' AS network_log,\n               error_class"
)


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("error_class", sa.Text))
        op.add_column(table, sa.Column("blocks", sa.Integer, nullable=False, server_default="0"))
        op.add_column(table, sa.Column("blocked_on_host", sa.Text))
    op.create_check_constraint("jobs_error_class_valid", "jobs", CLASS_CHECK)
    op.add_column("job_events", sa.Column("error_class", sa.Text))
    _audit_function(AUDIT_FUNCTION)
    op.execute(
        "CREATE OR REPLACE VIEW recent_failures AS"
        + _PROGRESS_VIEWS.RECENT_FAILURES.format(network=RECENT_FAILURES_COLUMNS)
    )
    op.execute("DROP VIEW failure_groups")
    op.execute(FAILURE_GROUPS)
    op.execute(f"COMMENT ON VIEW failure_groups IS '{GROUPS_COMMENT}'")


def downgrade() -> None:
    op.execute("DROP VIEW failure_groups")
    op.execute(_PROGRESS_VIEWS.FAILURE_GROUPS)
    op.execute(f"COMMENT ON VIEW failure_groups IS '{_PROGRESS_VIEWS.COMMENTS['failure_groups']}'")
    op.execute("DROP VIEW recent_failures")  # a column cannot be dropped by REPLACE
    network = ",\n               artifacts ->> 'network' AS network_log"
    op.execute(
        "CREATE VIEW recent_failures AS" + _PROGRESS_VIEWS.RECENT_FAILURES.format(network=network)
    )
    op.execute("COMMENT ON VIEW recent_failures IS 'Failed jobs of the last 7 days, newest first'")
    _audit_function(
        _INITIAL.AUDIT_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    )
    op.drop_column("job_events", "error_class")
    op.drop_constraint("jobs_error_class_valid", "jobs")
    for table in ("jobs", "jobs_archive"):
        for column in ("blocked_on_host", "blocks", "error_class"):
            op.drop_column(table, column)
