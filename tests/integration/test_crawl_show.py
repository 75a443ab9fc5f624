"""`crawls show` reads what the crawl's first page said about its site (real PostgreSQL)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.ops.commands.crawl_command import CrawlRequest, render_crawl, start
from scrapefleet.common.reads.crawl_figures import read_crawl

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def test_a_moved_site_is_shown(engine: Engine) -> None:
    with engine.begin() as conn:
        crawl_id = start(conn, CrawlRequest("http://a.test/"), max_attempts=1)
    with engine.connect() as conn:
        assert read_crawl(conn, crawl_id)["site_moved"] is None
    moved = "the seed redirected to www.a.test: the crawl follows it there"
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET result = CAST(:r AS jsonb) WHERE crawl_id = :c AND depth = 0"),
            {"r": json.dumps({"site_moved": moved}), "c": crawl_id},
        )
        shown = read_crawl(conn, crawl_id)
    assert render_crawl(shown)[1] == f"  site: {moved}"
