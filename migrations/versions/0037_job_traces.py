"""One trace per job: ``jobs.traceparent`` and ``jobs.trace_link`` (W3C trace context).

- ``traceparent``: the job's trace (``00-<trace id>-<span id>-<flags>``), set at submit from
  the submitter's span (common.tracing); every span the producer and the consumers make for
  the job is a child of it. A path that does not set it (a spawned child, a crawl's seed, a
  hand-written INSERT) gets a fresh random one from the column's default, so that every job
  has its own trace whoever inserted it. Random ids cost nothing to the fleet when no one
  traces: the daemons use the column only with tracing on.
- ``trace_link``: a trace the job's own links to. For a spawned job, its parent's
  ``traceparent``, set by the BEFORE INSERT trigger ``jobs_trace_link`` (a consumer's role
  inserts children only through spawn_children; the trigger runs as its owner so that no insert
  path needs to read the parent itself): its spans link to the parent's trace rather than join
  it, so a crawl of ten thousand pages is ten thousand traces, each one a readable size. For a
  job of a bulk submit, the submit's one span (common.tracing_jobs.SUBMIT_SPANS_MAX).

Both are bounded by their CHECK on the W3C shape (version 00, lower-case hex): what reaches
the tracing backend from a row is never anything else. Archived with the job.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

SHAPE = "'^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'"
# gen_random_uuid() is built in since PostgreSQL 13: 122 random bits for the trace id, and
# the first 64 bits of another for the span id (its version nibble makes it never all zero).
NEW_TRACEPARENT = (
    "'00-' || replace(gen_random_uuid()::text, '-', '') || '-'"
    " || left(replace(gen_random_uuid()::text, '-', ''), 16) || '-01'"
)

LINK_FUNCTION = """
CREATE FUNCTION jobs_trace_link() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT traceparent INTO NEW.trace_link FROM jobs WHERE id = NEW.parent_id;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.execute(f"ALTER TABLE jobs ADD COLUMN traceparent text DEFAULT ({NEW_TRACEPARENT})")
    op.execute("ALTER TABLE jobs ADD COLUMN trace_link text")
    for column in ("traceparent", "trace_link"):
        op.create_check_constraint(
            f"jobs_{column}_shape", "jobs", f"{column} IS NULL OR {column} ~ {SHAPE}"
        )
        op.add_column("jobs_archive", sa.Column(column, sa.Text))
    op.execute(LINK_FUNCTION)
    # A definer function must not resolve names through a schema its caller can write to.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        "'ALTER FUNCTION jobs_trace_link() SET search_path = %I, pg_temp', current_schema());"
        " END $$"
    )
    op.execute(
        "CREATE TRIGGER jobs_trace_link BEFORE INSERT ON jobs FOR EACH ROW"
        " WHEN (NEW.parent_id IS NOT NULL AND NEW.trace_link IS NULL)"
        " EXECUTE FUNCTION jobs_trace_link()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_trace_link ON jobs")
    op.execute("DROP FUNCTION jobs_trace_link()")
    for column in ("traceparent", "trace_link"):
        op.drop_column("jobs", column)
        op.drop_column("jobs_archive", column)
