"""A job's children go in once: ``jobs.spawned_claim`` marks the attempt that spawned them.

``spawn_children`` checked that the caller's attempt (job, claim, host) was in processing, and
nothing more: the same attempt could call it again before its completion, and a consumer's role
(which may set its own jobs' status) could move a completed job back to processing, getting a
new claim, and spawn up to 1,000 children again, as often as it liked. Now the function records
the claim whose children it inserted in ``jobs.spawned_claim`` (a column no consumer role may
write) and refuses, with an error, any later spawn under that job, whichever claim asks. The
children of a job legitimately go in only with its completion, in one transaction, so a second
spawn is never a consumer's honest work.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")
_HOST_WRITES = importlib.import_module("scrapefleet.migrations.versions.0017_host_writes")

PARENT_0017 = "SELECT id, depth, crawl_id, priority, max_attempts INTO parent FROM jobs"
PARENT_MARKED = (
    "SELECT id, depth, crawl_id, priority, max_attempts, spawned_claim INTO parent FROM jobs"
)
FOUND_0017 = "CONTINUE WHEN NOT FOUND;"
# Raised, not skipped: the caller's transaction (its completion with it) is rolled back, and
# the consumer's log says why.
FOUND_MARKED = """CONTINUE WHEN NOT FOUND;
        IF parent.spawned_claim IS NOT NULL THEN
            RAISE EXCEPTION 'spawn_children: job % already spawned its children (claim %)',
                parent.id, parent.spawned_claim USING ERRCODE = 'unique_violation';
        END IF;
        UPDATE jobs SET spawned_claim = (item->>'claim')::int WHERE id = parent.id;"""


def spawn_function(marked: bool) -> str:
    """0017's function (claims checked, priority capped, kinds a crawl names), and with
    ``marked`` the one-spawn rule."""
    text = _HOST_WRITES._spawn_function(capped=True)
    if not marked:
        return text
    for old, new in ((PARENT_0017, PARENT_MARKED), (FOUND_0017, FOUND_MARKED)):
        assert text.count(old) == 1, old  # 0017's text is frozen: fail loudly if it moved
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("spawned_claim", sa.Integer))
    # Jobs that already have children spawned them (claim unknown: the current one).
    op.execute(
        "UPDATE jobs SET spawned_claim = claims"
        " WHERE id IN (SELECT DISTINCT parent_id FROM jobs WHERE parent_id IS NOT NULL)"
    )
    op.execute(spawn_function(marked=True))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")


def downgrade() -> None:
    op.execute(spawn_function(marked=False))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "spawned_claim")
