"""A crawl as `scrapefleet crawl show` shows it: the crawls view's row, its pages by depth and
status, and what its first page said about its site. Reads only; archived pages count too."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound
from scrapefleet.common.store.sql_text import statement

CRAWL_SQL = statement("SELECT * FROM crawls WHERE crawl_id = :id")
# What the crawl's first page said about its site: a seed that redirected moved it.
SITE_MOVED_SQL = statement(
    """
SELECT result ->> 'site_moved' FROM jobs_with_archive
WHERE crawl_id = :id AND depth = 0 AND result ->> 'site_moved' IS NOT NULL
LIMIT 1
"""
)
BY_DEPTH_SQL = statement(
    """
SELECT depth, status, count(*) AS jobs FROM jobs_with_archive
WHERE crawl_id = :id
GROUP BY depth, status ORDER BY depth, status
"""
)


def read_crawl(conn: Connection, crawl_id: int) -> dict[str, Any]:
    """The crawls view's row, and jobs by depth and status; NotFound when there is none."""
    row = conn.execute(CRAWL_SQL, {"id": crawl_id}).mappings().one_or_none()
    if row is None:
        raise NotFound(f"no crawl {crawl_id}")
    shown = dict(row)
    by_depth: dict[int, dict[str, int]] = {}
    for depth, status, jobs in conn.execute(BY_DEPTH_SQL, {"id": crawl_id}):
        by_depth.setdefault(depth, {})[status] = jobs
    shown["by_depth"] = by_depth
    shown["site_moved"] = conn.execute(SITE_MOVED_SQL, {"id": crawl_id}).scalar()
    return shown
