"""Retention: finished jobs past their time move to jobs_archive, a batch per transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common.db import job_tables
from scrapefleet.common.store.sql_text import statement

__all__ = ["ARCHIVED_COLUMNS", "ARCHIVE_BATCH_SQL", "archive_finished_jobs"]

# Every column the two tables share, read from the table definitions: a hand-kept list once
# lost one (jobs.releases), and with it that figure of every archived job.
ARCHIVED_COLUMNS = tuple(
    c.name for c in job_tables.jobs.columns if c.name in job_tables.jobs_archive.c
)

# Oldest first, moved in one statement per batch: the DELETE's RETURNING feeds the INSERT, so a
# row is in exactly one of the two tables at every commit. SKIP LOCKED: a row some operator is
# touching right now waits for the next batch, the mover never waits for it.
# jobs_finished_at_idx finds the candidates. The statuses are the archive's sources in
# statuses.TRANSITIONS, and each column list is ARCHIVED_COLUMNS (a test holds them to both).
ARCHIVE_BATCH_SQL = statement(
    """
WITH moved AS (
  DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs
    WHERE finished_at IS NOT NULL AND finished_at < :cutoff
      AND status IN ({job.completed}, {job.failed}, {job.cancelled})
    ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED
  )
  RETURNING id, kind, payload, priority, status, host, attempts, max_attempts, releases,
    not_before, last_error, result, artifacts, dedupe_key, lock_key, created_at, queued_at,
    started_at, finished_at, heartbeat_at, callback_url, needs_browser, last_host,
    profile_pool, profile, parent_id, depth, crawl_id, rate_key, error_class, blocks,
    blocked_on_host, claims, lingering_host, lingering_claim, lingering_until, page_releases,
    spawned_claim, pinned_host, proxy_pool, proxy_id, proxy_session, traceparent, trace_link,
    spawn_kinds
)
INSERT INTO jobs_archive (id, kind, payload, priority, status, host, attempts, max_attempts,
  releases, not_before, last_error, result, artifacts, dedupe_key, lock_key, created_at,
  queued_at, started_at, finished_at, heartbeat_at, callback_url, needs_browser, last_host,
  profile_pool, profile, parent_id, depth, crawl_id, rate_key, error_class, blocks,
  blocked_on_host, claims, lingering_host, lingering_claim, lingering_until, page_releases,
  spawned_claim, pinned_host, proxy_pool, proxy_id, proxy_session, traceparent, trace_link,
  spawn_kinds)
SELECT id, kind, payload, priority, status, host, attempts, max_attempts, releases,
  not_before, last_error, result, artifacts, dedupe_key, lock_key, created_at, queued_at,
  started_at, finished_at, heartbeat_at, callback_url, needs_browser, last_host, profile_pool,
  profile, parent_id, depth, crawl_id, rate_key, error_class, blocks, blocked_on_host, claims,
  lingering_host, lingering_claim, lingering_until, page_releases, spawned_claim, pinned_host,
  proxy_pool, proxy_id, proxy_session, traceparent, trace_link, spawn_kinds
FROM moved
"""
)


def archive_finished_jobs(conn: Connection, cutoff: datetime, batch_rows: int) -> int:
    """Move up to ``batch_rows`` jobs finished before ``cutoff`` to jobs_archive; returns how
    many moved. Call it in a transaction per batch, until it returns less than ``batch_rows``."""
    return conn.execute(ARCHIVE_BATCH_SQL, {"cutoff": cutoff, "batch": batch_rows}).rowcount
