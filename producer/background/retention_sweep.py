"""Retention, on the producer's schedule: finished jobs past ``retention_days`` move to
jobs_archive. (Artifact folders live on the consumer hosts; each consumer's ArtifactJanitor
prunes its own.)

Jobs move ``retention_batch_rows`` at a time, one short transaction each (a DELETE ... RETURNING
feeding an INSERT, rows taken with SKIP LOCKED), so the hot table is never locked for long and
a crash loses nothing: every committed batch is wholly in one table. Their job_events stay.
The identities' lease rows (the ban rates' counts) go after as long, and never before two days
(the ban rates read the last day).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.runtime import metrics
from scrapefleet.common.settings import Settings

log = logging.getLogger(__name__)

MAX_BATCHES_PER_RUN = 1000  # a backlog is worked off over several runs, not in one long one
MIN_LEASE_KEEP = timedelta(days=2)


@dataclass(frozen=True)
class RetentionReport:
    archived_jobs: int


def archive_old_jobs(engine: Engine, settings: Settings, now: datetime) -> int:
    cutoff = now - timedelta(days=settings.retention_days)
    total = 0
    for _ in range(MAX_BATCHES_PER_RUN):
        with transaction(engine) as conn:
            moved = store.archive_finished_jobs(conn, cutoff, settings.retention_batch_rows)
        total += moved
        metrics.RETENTION_ARCHIVED_JOBS.inc(moved)
        if moved < settings.retention_batch_rows:
            break
    return total


def prune_leases(engine: Engine, settings: Settings, now: datetime) -> int:
    cutoff = now - max(timedelta(days=settings.retention_days), MIN_LEASE_KEEP)
    total = 0
    for _ in range(MAX_BATCHES_PER_RUN):
        with transaction(engine) as conn:
            pruned = store.prune_identity_leases(conn, cutoff, settings.retention_batch_rows)
        total += pruned
        if pruned < settings.retention_batch_rows:
            break
    return total


def run_retention(
    engine: Engine, settings: Settings, now: datetime | None = None
) -> RetentionReport:
    now = now or utcnow()
    archived = archive_old_jobs(engine, settings, now)
    pruned = prune_leases(engine, settings, now)
    if archived or pruned:
        log.info("retention: archived_jobs=%d identity_leases_pruned=%d", archived, pruned)
    return RetentionReport(archived)
