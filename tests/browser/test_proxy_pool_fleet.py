"""A proxy pool serving browser and HTTP jobs at once, end to end: five forwarding proxies on
their own loopback addresses (tests/integration/exit_proxies.py), a site that refuses one exit
address after a few requests, a real producer and a real consumer (capacity 6) with its own
Grid and Chromium under Xvfb.

What must show: every job completes and none uses an attempt for a block (a browser page's 403
is the proxy's block by the pool's own statuses: the host has no block rules); the blocked
proxy cools down (never leased while cooling) and is banned past its pool's threshold, as
identity_health and the dashboard say; no proxy carries more jobs at once than its pool's cap
(by the site's own count per exit address); no password in any CLI answer, page, log line,
row or file the consumer wrote.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.api import validate_job
from scrapefleet.common.http import client as http_client
from scrapefleet.common.identities.proxy_pools import parse_proxy
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.producer.producer_daemon import Producer
from tests.browser.consumer_helpers import consumer_settings, consumer_thread
from tests.cli_helpers import run_cli
from tests.integration.exit_proxies import (
    BlockingSite,
    ExitProxy,
    all_finished,
    exit_proxies,
    job_rows,
)
from tests.integration.producer_helpers import producer_settings, submit
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

SECRET = "fl33t-pw-Qx7"
ADDRESSES = [f"127.0.0.{n}" for n in range(2, 7)]
BURNT = "127.0.0.5"  # the site refuses it after QUOTA requests
QUOTA = 4
BROWSER_JOBS, HTTP_JOBS = 25, 175  # a browser job takes ten times an HTTP job's time
COOLDOWN_S = 1.0


@pytest.fixture
def proxies() -> Iterator[list[ExitProxy]]:
    with exit_proxies(ADDRESSES, "fleet", SECRET) as started:
        yield started


@pytest.fixture(autouse=True)
def fresh_client() -> Iterator[None]:
    http_client.close_shared_client()
    yield
    http_client.close_shared_client()


def test_a_pool_serves_browser_and_http_jobs_rotating_away_from_a_blocked_exit(
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    proxies: list[ExitProxy],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with engine.begin() as conn:
        store.add_proxies(conn, "mixed", [parse_proxy(p.url) for p in proxies])
        store.set_pool(
            conn, "mixed", {"cooldown_s": COOLDOWN_S, "ban_blocks": 2, "max_jobs_per_proxy": 1}
        )
    settings = consumer_settings(
        tmp_path, database_url, capacity=6, restart_every=0, reboot_every=0, max_blocks_per_job=5
    )
    began = time.monotonic()
    with BlockingSite({BURNT: QUOTA}) as site, consumer_thread(settings, database_url):
        # Every eighth job a browser's: the two kinds interleave on the pool's proxies.
        jobs = [
            validate_job(
                {
                    "kind": "fetch_page" if i % 8 == 0 else "http_get",
                    "payload": {"url": site.url(f"/p/{i}"), "proxy_pool": "mixed"},
                    "max_attempts": 3,
                }
            )
            for i in range(BROWSER_JOBS + HTTP_JOBS)
        ]
        ids = submit(engine, jobs)
        # The producer daemon as it runs: woken by the consumer's notices, else on its interval.
        producer = Producer(producer_settings(database_url, settings.state_dir), engine)
        producer.start()
        try:
            wait_for(lambda: all_finished(engine, ids), scaled(150), "200 jobs through the pool")
        finally:
            producer.stop()
    ran_s = time.monotonic() - began

    rows = job_rows(engine, ids)
    assert {r["status"] for r in rows} == {"completed"}, [r["last_error"] for r in rows]
    assert {r["attempts"] for r in rows} == {1}  # no attempt spent on a block
    assert sum(r["blocks"] for r in rows) == 2  # the burnt proxy's two blocks, then its ban
    kinds = {r["kind"] for r in rows}
    assert kinds == {"fetch_page", "http_get"}
    assert all(r["result"]["title"] == "Welcome" for r in rows if r["kind"] == "fetch_page")
    assert all(r["result"]["status"] == 200 for r in rows if r["kind"] == "http_get")

    log = site.log
    assert "127.0.0.1" not in log.requests  # nothing went around the proxies
    assert set(log.requests) == set(ADDRESSES)  # every exit address was used
    assert max(log.most_at_once.values()) == 1, log.most_at_once  # the cap of one, per proxy
    # Leased again only after its cool-down: QUOTA good requests, then two refused ones.
    assert log.requests[BURNT] == QUOTA + 2 and log.blocked[BURNT] == 2, log.requests
    refused_at = log.times[BURNT][QUOTA:]
    assert refused_at[1] - refused_at[0] >= COOLDOWN_S * 0.9
    assert sum(log.requests.values()) == BROWSER_JOBS + HTTP_JOBS + 2

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
        run_cli(["jobs", "show", str(ids[0])], database_url),
        run_cli(["jobs", "list"], database_url),
        run_cli(["status"], database_url),
    ]
    for result in shown:
        assert SECRET not in result.stdout + result.stderr
    assert "banned" in shown[0].stdout
    dashboard = create_app(load_settings(None, database_url=database_url), engine).test_client()
    for path in ("/identities", "/", "/jobs", f"/jobs/{ids[0]}", f"/jobs/{ids[1]}"):
        page = dashboard.get(path).get_data(as_text=True)
        assert SECRET not in page, path
    page = dashboard.get("/identities").get_data(as_text=True)
    assert f"http://***@{BURNT}:" in page and "banned" in page
    with engine.connect() as conn:
        for table in ("jobs", "job_events", "identity_leases", "proxies", "identity_health"):
            dumped = conn.execute(sa.text(f"SELECT string_agg(t::text, ' ') FROM {table} t"))
            assert SECRET not in (dumped.scalar() or ""), table
    assert not [r.getMessage() for r in caplog.records if SECRET in r.getMessage()]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]
    print(f"\n{BROWSER_JOBS} browser + {HTTP_JOBS} HTTP jobs through the pool: {ran_s:.1f} s")
    for kind in sorted(kinds):
        of_kind = [r for r in rows if r["kind"] == kind]
        runs = sorted((r["finished_at"] - r["started_at"]).total_seconds() for r in of_kind)
        first = min(r["started_at"] for r in of_kind)
        last = max(r["finished_at"] for r in of_kind)
        print(
            f"{kind}: median run {runs[len(runs) // 2]:.2f} s, slowest {runs[-1]:.2f} s,"
            f" first start to last finish {(last - first).total_seconds():.1f} s"
        )
