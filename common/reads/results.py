"""Jobs and their results out of the database: filtered, streamed, as dicts.

Reads only. The rows come through a server-side cursor (SQLAlchemy's ``yield_per`` with
psycopg: a named cursor), ``BATCH_ROWS`` at a time, so exporting a million results takes the
memory of one batch. Finished jobs that retention moved to ``jobs_archive`` are read too:
an export is the crawl's or the day's whole history, whatever retention did meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common.actions.error_classes import ERROR_CLASSES
from scrapefleet.common.db.schema_base import JOB_STATUSES
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.store.sql_text import statement

BATCH_ROWS = 2000
COLUMNS = (
    "id",
    "kind",
    "status",
    "host",
    "attempts",
    "created_at",
    "started_at",
    "finished_at",
    "payload",
    "result",
    "last_error",
    "error_class",
    "profile",
    "crawl_id",
    "depth",
)
# ResultFilter.params(), in the order of the arguments of matching_jobs (migration 0042): the
# rows of the view jobs_with_archive (COLUMNS, of jobs and of jobs_archive) that the filter
# matches, a part given as NULL matching every job. PostgreSQL inlines the function, so the
# statements' ORDER BY and LIMIT read both tables' indexes. A test checks each statement calls
# it so.
MATCHING_JOBS_SQL = """matching_jobs(CAST(:statuses AS text[]), :kind, :host,
  CAST(:since AS timestamptz), :profile, CAST(:crawl AS bigint), :error_class, :was_on,
  CAST(:rescued AS boolean))"""
# A listing: newest first, cut at the limit.
LIST_RESULTS_SQL = statement(
    """
SELECT * FROM matching_jobs(CAST(:statuses AS text[]), :kind, :host,
  CAST(:since AS timestamptz), :profile, CAST(:crawl AS bigint), :error_class, :was_on,
  CAST(:rescued AS boolean))
ORDER BY id DESC LIMIT :limit
"""
)
# A whole export: oldest first.
EXPORT_RESULTS_SQL = statement(
    """
SELECT * FROM matching_jobs(CAST(:statuses AS text[]), :kind, :host,
  CAST(:since AS timestamptz), :profile, CAST(:crawl AS bigint), :error_class, :was_on,
  CAST(:rescued AS boolean))
ORDER BY id
"""
)
COUNT_RESULTS_SQL = statement(
    """
SELECT count(*) FROM matching_jobs(CAST(:statuses AS text[]), :kind, :host,
  CAST(:since AS timestamptz), :profile, CAST(:crawl AS bigint), :error_class, :was_on,
  CAST(:rescued AS boolean))
"""
)
# The finished ones among :ids (an archived job is finished).
RESULTS_OF_SQL = statement(
    """
SELECT * FROM jobs_with_archive
WHERE id = ANY(:ids) AND status IN ({job.completed}, {job.failed}, {job.cancelled})
"""
)


@dataclass(frozen=True)
class ResultFilter:
    statuses: tuple[str, ...] = ()  # none: every status
    kind: str | None = None
    host: str | None = None
    since: datetime | None = None  # finished (or, unfinished, created) at or after
    limit: int | None = None
    profile: str | None = None  # jobs that ran (or will run) in this profile
    crawl: int | None = None  # the pages of this crawl (its root job's id)
    error_class: str | None = None  # jobs whose last failed attempt had this class
    was_on: str | None = None  # jobs that ran on this host at any attempt (rescued ones too)
    rescued: bool = False  # with was_on: only the jobs rescued from that host

    def __post_init__(self) -> None:
        unknown = [s for s in self.statuses if s not in JOB_STATUSES]
        if unknown:
            raise SubmitError(f"status {unknown[0]!r} is not one of {', '.join(JOB_STATUSES)}")
        if self.error_class is not None and self.error_class not in ERROR_CLASSES:
            raise SubmitError(
                f"error class {self.error_class!r} is not one of {', '.join(ERROR_CLASSES)}"
            )
        if self.limit is not None and self.limit < 1:
            raise SubmitError(f"limit must be at least 1, not {self.limit}")
        if self.rescued and self.was_on is None:
            raise SubmitError("--rescued needs --was-on HOST: the host they were rescued from")
        if self.since is not None and self.since.tzinfo is None:
            raise SubmitError("since must carry a time zone (e.g. 2026-11-23T07:00:00+00:00)")

    def params(self) -> dict[str, Any]:
        return {
            "statuses": list(self.statuses) or None,
            "kind": self.kind,
            "host": self.host,
            "since": self.since,
            "profile": self.profile,
            "crawl": self.crawl,
            "error_class": self.error_class,
            "was_on": self.was_on,
            "rescued": self.rescued,
        }

    def describe(self) -> str:
        parts = [
            f"status {'/'.join(self.statuses)}" if self.statuses else "",
            f"kind {self.kind!r}" if self.kind else "",
            f"host {self.host!r}" if self.host else "",
            f"since {self.since.isoformat()}" if self.since else "",
            f"profile {self.profile!r}" if self.profile else "",
            f"crawl {self.crawl}" if self.crawl is not None else "",
            f"error class {self.error_class}" if self.error_class else "",
            f"was on host {self.was_on!r}" if self.was_on else "",
            "rescued from it" if self.rescued else "",
        ]
        return ", ".join(p for p in parts if p) or "every job"


def count_results(conn: Connection, which: ResultFilter) -> int:
    found = int(conn.execute(COUNT_RESULTS_SQL, which.params()).scalar_one())
    return min(found, which.limit) if which.limit else found


def iter_results(engine: Engine, which: ResultFilter) -> Iterator[dict[str, Any]]:
    """Every matching job as a dict of COLUMNS, streamed."""
    # Newest first for a listing (it is cut at the limit); oldest first for a whole export.
    if which.limit:
        statement, params = LIST_RESULTS_SQL, {**which.params(), "limit": which.limit}
    else:
        statement, params = EXPORT_RESULTS_SQL, which.params()
    with engine.connect() as conn:
        rows = conn.execution_options(yield_per=BATCH_ROWS).execute(statement, params)
        for row in rows:
            yield dict(row._mapping)


def results_of(conn: Connection, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The finished ones among ``job_ids``: id -> their row (status, result, last_error)."""
    rows = conn.execute(RESULTS_OF_SQL, {"ids": list(job_ids)})
    return {r.id: dict(r._mapping) for r in rows}
