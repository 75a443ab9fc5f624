"""A crawl end to end: the CLI starts it, real consumer processes crawl a linked site on
127.0.0.1 and are killed with SIGKILL in the middle, and every page within the depth bound is
completed exactly once, none beyond it or off the site is fetched, and no page is fetched
twice unless its attempt was cut short by a kill."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.local.local_fleet import LocalFleet
from tests.cli_helpers import run_cli
from tests.e2e.crawl_site import Site, expected_paths, serve_site
from tests.e2e.test_local_fleet import _add_hosts, fleet_factory, scalar  # noqa: F401  (fixture)
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

DEPTH = 3


@pytest.fixture
def site() -> Iterator[Site]:
    with serve_site() as served:
        yield served


def _processing_on(engine: Engine, host: str) -> list[int]:
    sql = "SELECT id FROM jobs WHERE host = :h AND status = 'processing'"
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), {"h": host}).scalars())


def _kill_mid_crawl(engine: Engine, fleet: LocalFleet, host: str, after_done: int) -> list[int]:
    """SIGKILL host's consumer once `after_done` pages are done and it holds a page; restart
    it once the others have gone on. Returns the jobs it held."""
    done = "SELECT count(*) FROM jobs WHERE status = 'completed'"
    wait_for(
        lambda: scalar(engine, done) >= after_done and _processing_on(engine, host),
        60,
        f"{host} to hold a page after {after_done} done",
    )
    fleet.signal(f"consumer-{host}", signal.SIGKILL)
    held = _processing_on(engine, host)
    before = scalar(engine, done)
    wait_for(lambda: scalar(engine, done) > before + 5, 60, "the other host to go on")
    fleet.start_consumer(host)
    return held


def test_a_crawl_visits_every_page_once_with_consumers_killed(
    engine: Engine,
    database_url: str,
    site: Site,
    fleet_factory: Callable[..., LocalFleet],  # noqa: F811  (the imported fixture)
) -> None:
    _add_hosts(engine, ["h1", "h2"], capacity=3)
    fleet = fleet_factory(["h1", "h2"]).start()
    started = run_cli(["crawl", site.url("/"), "--depth", str(DEPTH)], database_url)
    assert started.returncode == 0, started.stderr
    crawl_id = int(started.stdout)
    expected = expected_paths(DEPTH)
    assert 250 < len(expected) < 400  # a few hundred pages, and a level beyond the bound

    held = _kill_mid_crawl(engine, fleet, "h1", after_done=len(expected) // 4)
    held += _kill_mid_crawl(engine, fleet, "h2", after_done=len(expected) // 2)
    assert held, "no page was in flight when a consumer was killed"

    unfinished = "SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed')"
    wait_for(lambda: scalar(engine, unfinished) == 0, 120, "the crawl to finish")

    with engine.connect() as conn:
        jobs = conn.execute(
            sa.text(
                "SELECT j.payload->>'url' AS url, j.status, j.depth, j.crawl_id,"
                " (SELECT count(*) FROM job_events e WHERE e.job_id = j.id"
                "   AND e.to_status = 'processing') AS starts"
                " FROM jobs j"
            )
        ).all()
    completed = Counter(urlsplit(j.url).path for j in jobs if j.status == "completed")
    assert set(completed) == expected, "a page lost, or one beyond the bound or the site"
    assert set(completed.values()) == {1}, "a page completed twice"
    assert {j.status for j in jobs} == {"completed"}
    assert {j.crawl_id for j in jobs} == {crawl_id}
    assert max(j.depth for j in jobs) == DEPTH

    # Server side: each page fetched once, unless an attempt at it was cut short by a kill
    # (then at most once per attempt started); nothing off the site, nothing past the bound.
    starts = {urlsplit(j.url).path: j.starts for j in jobs}
    # robots.txt (404: everything allowed) read once per consumer process: two, each restarted.
    assert 1 <= site.hits.pop("/robots.txt", 0) <= 4
    assert set(site.hits) == expected
    assert site.other_hits == Counter()
    refetched = {p: n for p, n in site.hits.items() if n > 1}
    assert all(n <= starts[p] for p, n in refetched.items()), refetched
    assert all(starts[p] > 1 for p in refetched), "fetched twice without being interrupted"

    shown = run_cli(["crawls", "show", str(crawl_id), "--json"], database_url)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["done"], report["pending"], report["failed"]) == (len(expected), 0, 0)
    assert report["depth_reached"] == DEPTH
    assert report["by_depth"]["0"] == {"completed": 1}
    text = run_cli(["crawls", "show", str(crawl_id)], database_url).stdout
    assert f"{len(expected):,} done, 0 pending, 0 failed" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ftp://127.0.0.1/"], "url: 'ftp://127.0.0.1/' is not an http:// or https:// URL"),
        (["http://127.0.0.1/", "--depth", "-1"], "--depth: -1 is below 0"),
        (["http://127.0.0.1/", "--include", "(unclosed"], "--include[0]: not a valid regular"),
        (["http://127.0.0.1/", "--exclude", "ok", "--exclude", "*"], "--exclude[1]: not a valid"),
        (["http://127.0.0.1/", "--field", "price"], "--field: 'price' is not NAME=REGEX"),
        (["http://127.0.0.1/", "--max-pages", "0"], "--max-pages: must be between 1"),
    ],
)
def test_bad_crawl_input_is_refused_with_nothing_inserted(
    engine: Engine, database_url: str, args: list[str], message: str
) -> None:
    refused = run_cli(["crawl", *args], database_url)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error: ") and message in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert scalar(engine, "SELECT count(*) FROM jobs") == 0
    assert scalar(engine, "SELECT count(*) FROM crawl_runs") == 0


def test_crawls_show_of_no_crawl(engine: Engine, database_url: str, tmp_path: Path) -> None:
    missing = run_cli(["crawls", "show", "999"], database_url)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no crawl 999"
