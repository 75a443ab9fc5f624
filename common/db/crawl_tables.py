"""The crawls' tables: ``crawl_runs`` (a crawl's bounds and job count) and ``crawl_seen`` (every
dedupe key a crawl ever inserted a job for). The jobs of a crawl are rows of ``jobs``
(common.db.job_tables), found by their ``crawl_id``.

Alembic migrations create them; tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa

from scrapefleet.common.db.schema_base import TS, metadata

# ---------------------------------------------------------------- migration 0012: crawls

# One row per crawl, keyed by its root job's id: the bounds its spawned jobs respect and how
# many jobs it holds. Written by `scrapefleet crawl` and the function spawn_children.
crawl_runs = sa.Table(
    "crawl_runs",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("seed", sa.Text),
    sa.Column("max_depth", sa.Integer, nullable=False, server_default="5"),
    sa.Column("max_jobs", sa.Integer, nullable=False, server_default="10000"),
    sa.Column("jobs_count", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    # Migration 0017: the kinds its jobs may spawn (NULL: any); spawn_children drops the rest.
    sa.Column("spawn_kinds", sa.ARRAY(sa.Text)),
    sa.CheckConstraint("max_depth >= 0", name="crawl_runs_max_depth_not_negative"),
    sa.CheckConstraint("max_jobs >= 1", name="crawl_runs_max_jobs_positive"),
    comment="A crawl's bounds and job count, one row per crawl (its id is its root job's id)",
)

# Every dedupe key a crawl ever inserted a job for, kept whatever became of the job.
crawl_seen = sa.Table(
    "crawl_seen",
    metadata,
    sa.Column("crawl_id", sa.BigInteger, primary_key=True),
    sa.Column("dedupe_key", sa.Text, primary_key=True),
    # The nearest depth the key was offered at, and the job it became.
    sa.Column("depth", sa.Integer, nullable=False),
    sa.Column("job_id", sa.BigInteger),
    comment="Every dedupe key a crawl ever inserted a job for: never one URL twice",
)
