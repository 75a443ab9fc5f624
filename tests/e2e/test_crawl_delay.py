"""A site's Crawl-delay as the site sees it: real producer and consumer processes crawl a site
on 127.0.0.1 whose robots.txt asks 1 s between requests, and the site's own log of request
times holds the gaps to the delay, not to the producer's 2 s interval."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.local.local_fleet import LocalFleet
from tests.cli_helpers import run_cli
from tests.e2e.test_local_fleet import FAST, _add_hosts, scalar
from tests.integration.page_server import PageSite, serve_pages
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PAGES = 8


@pytest.fixture
def site() -> Iterator[PageSite]:
    with serve_pages() as served:
        served.page("/robots.txt", "User-agent: *\nCrawl-delay: 1\n", ctype="text/plain")
        served.page("/", "".join(f'<a href="/p/{i}">{i}</a>' for i in range(PAGES)))
        for i in range(PAGES):
            served.page(f"/p/{i}", f"<title>{i}</title>")
        yield served


def test_a_crawl_delay_below_the_producer_interval_is_kept(
    engine: Engine, database_url: str, tmp_path: Path, site: PageSite
) -> None:
    _add_hosts(engine, ["h1"], capacity=4)
    # The producer at its default interval (2 s): the delay is half of it.
    env = FAST | {"SCRAPEFLEET_PRODUCER_INTERVAL_S": "2"}
    fleet = LocalFleet(database_url, tmp_path / "state", ["h1"], env=env).start()
    try:
        started = run_cli(["crawl", site.url("/"), "--depth", "1"], database_url)
        assert started.returncode == 0, started.stderr
        done = "SELECT count(*) FROM jobs WHERE status = 'completed'"
        wait_for(lambda: scalar(engine, done) == PAGES + 1, 120, "the crawl to finish")
    finally:
        fleet.stop()
    pages = [at for at, path in site.requests if path != "/robots.txt"]
    assert len(pages) == PAGES + 1
    # The root's answer taught the producer the delay: its children are what it paced.
    gaps = [b - a for a, b in itertools.pairwise(pages[1:])]
    assert min(gaps) >= 0.9, gaps  # the site's delay kept (the producer's clock, not the site's)
    assert statistics.median(gaps) < 1.5, gaps  # not stretched to the 2 s interval
