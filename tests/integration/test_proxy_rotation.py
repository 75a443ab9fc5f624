"""A proxy pool end to end, with real proxies: five forwarding proxies on their own loopback
addresses (tests/integration/exit_proxies.py), a site that refuses one exit address after a few
requests, a real producer and a real consumer running ``http_get`` jobs through the pool.

What must show: every job completes and none uses an attempt for a block; the blocked proxy
cools down (never leased while cooling) and is banned past its pool's threshold, as
identity_health, the metrics and the dashboard say; no proxy carries more jobs at once than its
pool's cap (by the site's own count per exit address); no password in any CLI answer, page, log
line or row. And the same site against a job pinned to that proxy (its own ``proxy``, no pool):
blocked again and again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.api import validate_job
from scrapefleet.common.http import client as http_client
from scrapefleet.common.identities.proxy_pools import parse_proxy
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.producer.background.fleet_metrics import read_fleet_snapshot
from scrapefleet.producer.producer_daemon import Producer
from tests.cli_helpers import run_cli
from tests.integration.exit_proxies import (
    BlockingSite,
    ExitProxy,
    all_finished,
    exit_proxies,
    job_rows,
)
from tests.integration.producer_helpers import producer_settings, submit
from tests.integration.test_consumer import consumer_thread, make_settings, wait_started
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

HOST = "c1"
SECRET = "pw-Zq81xK"
ADDRESSES = [f"127.0.0.{n}" for n in range(2, 7)]
BURNT = "127.0.0.4"  # the site refuses it after QUOTA requests
QUOTA = 3
JOBS = 120
COOLDOWN_S = 1.0


@pytest.fixture
def proxies() -> Iterator[list[ExitProxy]]:
    with exit_proxies(ADDRESSES, "user", SECRET) as started:
        yield started


@pytest.fixture
def site() -> Iterator[BlockingSite]:
    with BlockingSite({BURNT: QUOTA}) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh_client() -> Iterator[None]:
    http_client.close_shared_client()
    yield
    http_client.close_shared_client()


class _Producer:
    """A real producer cycling in a thread until stopped."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.producer.run_cycle()


@pytest.fixture
def fleet(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[Any]:
    settings = make_settings(tmp_path, database_url, capacity=6, max_blocks_per_job=5)
    producer = Producer(producer_settings(database_url, settings.state_dir), engine)
    cycling = _Producer(producer)
    with consumer_thread(settings, database_url, host=HOST):
        wait_started(engine, settings, HOST)
        cycling.thread.start()
        try:
            yield settings
        finally:
            cycling.stop.set()
            cycling.thread.join(scaled(10))
            producer.stop()


def test_a_pool_rotates_away_from_a_blocked_exit_and_bans_it(
    engine: Engine,
    database_url: str,
    proxies: list[ExitProxy],
    site: BlockingSite,
    fleet: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with engine.begin() as conn:
        store.add_proxies(conn, "res", [parse_proxy(p.url) for p in proxies])
        store.set_pool(
            conn, "res", {"cooldown_s": COOLDOWN_S, "ban_blocks": 2, "max_jobs_per_proxy": 1}
        )
    jobs = [
        validate_job(
            {"kind": "http_get", "payload": {"url": site.url(f"/p/{i}"), "proxy_pool": "res"}}
        )
        for i in range(JOBS)
    ]
    ids = submit(engine, jobs)
    wait_for(lambda: all_finished(engine, ids), scaled(60), f"{JOBS} jobs through the pool")

    rows = job_rows(engine, ids)
    assert {r["status"] for r in rows} == {"completed"}, [r["last_error"] for r in rows]
    assert {r["attempts"] for r in rows} == {1}  # no attempt spent on a block
    assert sum(r["blocks"] for r in rows) == 2  # the burnt proxy's two blocks, then its ban
    assert all(r["result"]["status"] == 200 for r in rows)

    log = site.log
    assert sum(log.requests.values()) == JOBS + 2
    assert set(log.requests) == set(ADDRESSES)  # every exit address was used
    assert max(log.most_at_once.values()) == 1, log.most_at_once  # the cap of one, per proxy
    # Leased again only after its cool-down: QUOTA good requests, then two refused ones.
    assert log.requests[BURNT] == QUOTA + 2 and log.blocked[BURNT] == 2
    refused_at = log.times[BURNT][QUOTA:]
    assert refused_at[1] - refused_at[0] >= COOLDOWN_S * 0.9

    with engine.connect() as conn:
        health = {
            r.identity: r
            for r in conn.execute(sa.text("SELECT * FROM identity_health WHERE kind = 'proxy'"))
        }
    burnt = health[f"http://***@{BURNT}:{proxies[ADDRESSES.index(BURNT)].port}"]
    assert burnt.state == "banned" and burnt.blocks == 2 and burnt.blocks_last_hour == 2
    assert all(r.state == "ready" for name, r in health.items() if BURNT not in name)

    # No password anywhere a person or a file sees it.
    shown = [
        run_cli(["proxies", "list"], database_url),
        run_cli(["proxies", "list", "--json"], database_url),
        run_cli(["jobs", "show", str(ids[0])], database_url),
        run_cli(["status"], database_url),
    ]
    for result in shown:
        assert SECRET not in result.stdout + result.stderr
    assert "banned" in shown[0].stdout
    figures = read_fleet_snapshot(engine).proxy_pools["res"]  # the metrics' source
    assert figures.states == {"ready": 4, "banned": 1} and figures.blocks == 2
    dashboard = create_app(load_settings(None, database_url=database_url), engine).test_client()
    page = dashboard.get("/identities").get_data(as_text=True)
    assert f"http://***@{BURNT}:" in page and "banned" in page and SECRET not in page
    with engine.connect() as conn:
        for table in ("jobs", "job_events", "identity_leases", "proxies", "identity_health"):
            dumped = conn.execute(sa.text(f"SELECT string_agg(t::text, ' ') FROM {table} t"))
            assert SECRET not in (dumped.scalar() or ""), table
    assert not [r.getMessage() for r in caplog.records if SECRET in r.getMessage()]
    with engine.connect() as conn:
        outcomes = dict(
            conn.execute(sa.text("SELECT outcome, count(*) FROM identity_leases GROUP BY 1")).all()
        )
    assert outcomes == {"ok": JOBS, "blocked": 2}  # every success recorded for its proxy


def test_a_job_pinned_to_the_blocked_proxy_meets_the_block_again(
    engine: Engine, proxies: list[ExitProxy], site: BlockingSite, fleet: Any
) -> None:
    burnt = proxies[ADDRESSES.index(BURNT)]
    site.log.requests[BURNT] = QUOTA  # the site has had enough of this address already
    job = validate_job(
        {
            "kind": "http_get",
            "payload": {"url": site.url("/pinned"), "proxy": burnt.url},
            "max_attempts": 3,
        }
    )
    (job_id,) = submit(engine, [job])
    wait_for(lambda: all_finished(engine, [job_id]), scaled(30), "the pinned job")

    (row,) = job_rows(engine, [job_id])
    # Without a pool nothing rotates: the same exit address is refused attempt after attempt.
    assert row["status"] == "failed"
    assert site.log.blocked[BURNT] == 3 and set(site.log.blocked) == {BURNT}
    assert "403" in (row["last_error"] or "")


def test_a_sticky_session_sends_each_sites_jobs_through_one_exit(
    engine: Engine, proxies: list[ExitProxy], fleet: Any
) -> None:
    with engine.begin() as conn:
        store.add_proxies(conn, "res", [parse_proxy(p.url) for p in proxies])
    with BlockingSite({}) as site:  # blocks no exit: nothing retires a session here
        _two_sites_in_sessions(engine, site)


def _two_sites_in_sessions(engine: Engine, site: BlockingSite) -> None:
    jobs = [
        validate_job(
            {
                "kind": "http_get",
                "payload": {
                    "url": site.url(f"/p/{i}", name=name),
                    "proxy_pool": "res",
                    "session": "site",
                },
            }
        )
        for i in range(12)
        for name in ("shop-a", "shop-b")
    ]
    ids = submit(engine, jobs)
    wait_for(lambda: all_finished(engine, ids), scaled(60), "two sites' sessions")

    assert {r["status"] for r in job_rows(engine, ids)} == {"completed"}
    seen = {name: set(site.log.by_site[f"{name}.test"]) for name in ("shop-a", "shop-b")}
    assert all(len(addresses) == 1 for addresses in seen.values()), seen  # one visitor each
    assert seen["shop-a"] != seen["shop-b"]  # and the two sessions on different exits
    # One cookie jar per session: the cookie the site gave the session's first job comes back
    # with every later one, and never in the other session.
    for name in ("shop-a", "shop-b"):
        visits = [v for v in site.log.visits if v[0] == f"{name}.test"]
        given = [v[3] for v in visits if v[3]]
        assert len(given) == 1 and visits[0][3] == given[0], visits
        assert all(v[2] == given[0] for v in visits[1:]), visits
        assert len({v[4] for v in visits}) == 1  # and one User-Agent
    cookies = {v[2] or v[3] for v in site.log.visits}
    assert len(cookies) == 2  # the two sessions' visitors


def test_a_crawls_children_inherit_its_pool_and_session_never_its_leased_url(
    engine: Engine, proxies: list[ExitProxy], fleet: Any
) -> None:
    with engine.begin() as conn:
        store.add_proxies(conn, "res", [parse_proxy(p.url) for p in proxies])
    with BlockingSite({}) as site:
        seed = validate_job(
            {
                "kind": "crawl",
                "payload": {"url": site.url("/hub"), "proxy_pool": "res", "session": "site"},
            }
        )
        (seed_id,) = submit(engine, [seed])

        def crawled() -> bool:
            with engine.connect() as conn:
                ids = list(
                    conn.execute(
                        sa.text("SELECT id FROM jobs WHERE id = :id OR parent_id = :id"),
                        {"id": seed_id},
                    ).scalars()
                )
            return len(ids) == 4 and all_finished(engine, ids)

        wait_for(crawled, scaled(60), "the crawl's seed and its three children")

    with engine.connect() as conn:
        rows = [
            dict(r._mapping)
            for r in conn.execute(
                sa.text("SELECT * FROM jobs WHERE parent_id = :id ORDER BY id"), {"id": seed_id}
            )
        ]
    assert len(rows) == 3 and {r["status"] for r in rows} == {"completed"}
    assert {(r["proxy_pool"], r["proxy_session"]) for r in rows} == {("res", "site.test")}
    assert all(r["payload"]["proxy_pool"] == "res" and "proxy" not in r["payload"] for r in rows)
    assert not [r for r in rows if SECRET in str(r)]  # the leased URL was not carried on
    # Every page, the children's too, through the pool and, in one session, one exit.
    assert "127.0.0.1" not in site.log.requests
    assert len(site.log.by_site["site.test"]) == 1, site.log.by_site


def test_a_session_used_up_starts_again_with_an_empty_jar(
    engine: Engine, proxies: list[ExitProxy], fleet: Any
) -> None:
    with engine.begin() as conn:
        store.add_proxies(conn, "res", [parse_proxy(p.url) for p in proxies])
        store.set_pool(conn, "res", {"session_max_uses": 4})
    with BlockingSite({}) as site:
        jobs = [
            validate_job(
                {
                    "kind": "http_get",
                    "payload": {"url": site.url(f"/p/{i}"), "proxy_pool": "res", "session": "s1"},
                }
            )
            for i in range(8)
        ]
        ids = submit(engine, jobs)
        wait_for(lambda: all_finished(engine, ids), scaled(60), "two sessions' jobs")

    assert {r["status"] for r in job_rows(engine, ids)} == {"completed"}
    visits = site.log.visits
    assert len(visits) == 8
    # Two sessions of four jobs each: each the site's one visitor (one cookie, one address),
    # the second starting with no cookie at all.
    for session in (visits[:4], visits[4:]):
        assert session[0][2] is None and session[0][3] is not None, visits
        assert all(v[2] == session[0][3] for v in session[1:]), visits
        assert len({v[1] for v in session}) == 1, visits
    assert visits[0][3] != visits[4][3]
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT cookies::text FROM proxy_session_jars")).scalars()
        assert [visits[4][3] in text for text in stored] == [True]
