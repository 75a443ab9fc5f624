"""Retention: finished jobs past their time move to jobs_archive, a batch per transaction."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.db import tables
from scrapefleet.common.store.statuses import sources, sql_list

__all__ = ["ARCHIVED_COLUMNS", "ARCHIVE_BATCH_SQL", "archive_finished_jobs"]

# Every column the two tables share, read from the table definitions: a hand-kept list once
# lost one (jobs.releases), and with it that figure of every archived job.
ARCHIVED_COLUMNS = tuple(c.name for c in tables.jobs.columns if c.name in tables.jobs_archive.c)
_COLUMNS = ", ".join(ARCHIVED_COLUMNS)
_ARCHIVABLE = sources("archive_finished_jobs", None)

# Oldest first, moved in one statement per batch: the DELETE's RETURNING feeds the INSERT, so a
# row is in exactly one of the two tables at every commit. SKIP LOCKED: a row some operator is
# touching right now waits for the next batch, the mover never waits for it.
# jobs_finished_at_idx finds the candidates.
ARCHIVE_BATCH_SQL = sa.text(
    "WITH moved AS ("
    "  DELETE FROM jobs WHERE id IN ("
    "    SELECT id FROM jobs"
    "    WHERE finished_at IS NOT NULL AND finished_at < :cutoff"
    f"      AND status IN {sql_list(_ARCHIVABLE)}"
    "    ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED)"
    f"  RETURNING {_COLUMNS})"
    f" INSERT INTO jobs_archive ({_COLUMNS}) SELECT {_COLUMNS} FROM moved"
)


def archive_finished_jobs(conn: Connection, cutoff: datetime, batch_rows: int) -> int:
    """Move up to ``batch_rows`` jobs finished before ``cutoff`` to jobs_archive; returns how
    many moved. Call it in a transaction per batch, until it returns less than ``batch_rows``."""
    return conn.execute(ARCHIVE_BATCH_SQL, {"cutoff": cutoff, "batch": batch_rows}).rowcount
