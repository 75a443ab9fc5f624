"""Crawls: starting one, and the children a completion inserts.

A crawl's id is its root job's id (``jobs.crawl_id``; ``crawl_runs`` holds its bounds, and
``crawl_seen`` every dedupe key it ever inserted a job for). Children are inserted by the
database function ``spawn_children`` (migration 0012), the one path a consumer's role has to
insert jobs: it checks each attempt (by its claim, 0016) is the caller's, in processing, and
locks it, so the completion that follows in the same transaction moves it. A child gets at most
its parent's priority, and only a kind its crawl allows (``crawl_runs.spawn_kinds``, when set;
migration 0017). ``spawn_children`` here must therefore run BEFORE that completion, in the same
transaction (attempts.complete_jobs does), once for all the transaction's parents: it takes its
locks in one order (crawls, then jobs, each by id), which two calls in one transaction would not.
A job's children go in once: the function marks the claim that spawned them
(``jobs.spawned_claim``) and raises on any later spawn under that job (migration 0024).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.db.executes import Executes
from scrapefleet.common.store.sql_text import statement

__all__ = ["SPAWN_SQL", "START_CRAWL_SQL", "spawn_children", "start_crawl"]

SPAWN_SQL = statement(
    """
SELECT parent_job, children_inserted FROM spawn_children(:host, CAST(:spawns AS jsonb))
"""
)
# The root job and its crawl in one statement: its id taken first, so that it is its own
# crawl_id; the seed's dedupe key is seen from the start (a link back to it spawns nothing).
# Its pages spawn pages of its own kind only (spawn_kinds: the database drops any other kind a
# host hands it).
START_CRAWL_SQL = statement(
    """
WITH new_id AS (
  SELECT nextval(pg_get_serial_sequence('jobs', 'id')) AS id
), root AS (
  INSERT INTO jobs (id, kind, payload, priority, max_attempts, needs_browser, crawl_id,
    depth, status)
  SELECT id, :kind, CAST(:payload AS jsonb), :priority, :max_attempts, :needs_browser, id,
    0, {job.pending}
  FROM new_id
  RETURNING id
), run AS (
  INSERT INTO crawl_runs (id, seed, max_depth, max_jobs, spawn_kinds)
  SELECT id, :seed, :max_depth, :max_jobs, ARRAY[CAST(:kind AS text)] FROM root
  RETURNING id
), seen AS (
  INSERT INTO crawl_seen (crawl_id, dedupe_key, depth, job_id)
  SELECT id, CAST(:dedupe_key AS text), 0, id FROM root WHERE :dedupe_key IS NOT NULL
)
SELECT id FROM run
"""
)


def spawn_children(
    conn: Executes,
    host: str,
    spawns: Sequence[tuple[int, int, Sequence[Mapping[str, Any]]]],
) -> dict[int, int]:
    """Insert the children (``{kind, payload, needs_browser, dedupe_key?, priority?}``, checked
    by common.actions.spawn) of each (job id, claim, children) of this host's attempts still in
    processing, and lock those attempts until the caller's transaction ends. Returns job id ->
    children inserted (dropped: a key the crawl has seen, past max_depth or max_jobs); a job
    missing from it is no longer this host's, and nothing was inserted for it."""
    if not spawns:
        return {}
    entries = [{"job": job, "claim": claim, "children": list(c)} for job, claim, c in spawns]
    params = {"host": host, "spawns": json.dumps(entries)}
    return {row.parent_job: row.children_inserted for row in conn.execute(SPAWN_SQL, params)}


def start_crawl(
    conn: Connection,
    *,
    kind: str,
    payload: Mapping[str, Any],
    max_depth: int,
    max_jobs: int,
    seed: str | None = None,
    dedupe_key: str | None = None,
    priority: int = 0,
    max_attempts: int = 3,
    needs_browser: bool = False,
) -> int:
    """Insert a crawl's root job (pending, depth 0) and its crawl row; returns the crawl id
    (= the root job's id). Bounds are checked by the caller and by the table's constraints."""
    params = {
        "kind": kind,
        "payload": json.dumps(payload),
        "priority": priority,
        "max_attempts": max_attempts,
        "needs_browser": needs_browser,
        "seed": seed,
        "max_depth": max_depth,
        "max_jobs": max_jobs,
        "dedupe_key": dedupe_key,
    }
    return int(conn.execute(START_CRAWL_SQL, params).scalar_one())
