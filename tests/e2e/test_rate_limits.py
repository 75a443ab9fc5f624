"""Rate limits with a producer and consumer hosts as real processes.

- One key limited to 2 at once and 60 a minute, a backlog on it, and other keys' jobs beside
  it: the limited key never exceeds its limits, measured from its attempts' start and finish
  times (job_events), and the others finish while the backlog still waits.
- A site that answers 429 with a Retry-After: its key is paused, every job of it, until then
  (measured by the site's own clock), slowed down, and back to full pace after successes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LIMITED = "limited.test"
LIMITS = {LIMITED: {"concurrency": 2, "per_minute": 60}}
ENV = {
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    "SCRAPEFLEET_HEARTBEAT_S": "0.5",
    "SCRAPEFLEET_RATE_LIMITS": json.dumps(LIMITS),
}
HOSTS = ["h1", "h2"]


def _submit(engine: Engine, count: int, key: str | None = None, spread: int = 0) -> list[int]:
    jobs = [
        NewJob("noop", {"sleep_s": 0.005}, rate_key=key or f"site-{i % spread}.test")
        for i in range(count)
    ]
    with engine.begin() as conn:
        return store.insert_jobs(conn, jobs, default_max_attempts=3).ids


def _count(engine: Engine, sql: str, **params: object) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


def _attempts(engine: Engine, key: str) -> list[tuple[datetime, datetime | None]]:
    """(start, end) of every attempt of ``key``'s jobs, from the audit rows."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT s.at AS started, (SELECT min(e.at) FROM job_events e"
                "   WHERE e.job_id = s.job_id AND e.from_status = 'processing' AND e.id > s.id)"
                "   AS ended"
                " FROM job_events s JOIN jobs j ON j.id = s.job_id"
                " WHERE j.rate_key = :key AND s.to_status = 'processing'"
            ),
            {"key": key},
        ).all()
    return [(r.started, r.ended) for r in rows]


def _most_at_once(attempts: list[tuple[datetime, datetime | None]]) -> int:
    # An end sorts before a start at the same instant: a slot freed and refilled is not overlap.
    edges = sorted([(s, 1) for s, _ in attempts] + [(e, -1) for _, e in attempts if e])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_a_limited_key_keeps_its_limits_and_the_others_are_not_held_up(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        for name in HOSTS:
            store.add_host(conn, HostSpec(name=name, capacity=4))
    limited = _submit(engine, 300, LIMITED)  # first: ahead of every other job in the queue
    others = _submit(engine, 100, spread=10)
    fleet = LocalFleet(database_url, tmp_path / "state", HOSTS, env=ENV)
    try:
        fleet.start()
        done = "SELECT count(*) FROM jobs WHERE status = 'completed' AND id = ANY(:ids)"
        wait_for(
            lambda: _count(engine, done, ids=others) == len(others),
            scaled(60),
            "the other keys' jobs to finish",
        )
        # The limit let through its minute's worth at most...
        limited_done_then = _count(engine, done, ids=limited)
        wait_for(
            lambda: _count(engine, done, ids=limited) >= 60,
            scaled(30),
            "the limited key's first minute of jobs",
        )
        # ...and a second batch of other jobs, assigned cycle after cycle, finishes while the
        # limited key gets nothing more: every one of those cycles would have given it a slot.
        more = _submit(engine, 40, spread=4)
        wait_for(
            lambda: _count(engine, done, ids=more) == len(more),
            scaled(30),
            "the second batch of other jobs",
        )
        with engine.connect() as conn:
            view = conn.execute(
                sa.text("SELECT * FROM rate_limits WHERE key = :key"), {"key": LIMITED}
            ).one()
    finally:
        fleet.stop()

    attempts = _attempts(engine, LIMITED)
    starts = sorted(s for s, _ in attempts)
    assert len(starts) == 60, len(starts)  # the test runs well within one minute
    assert (starts[-1] - starts[0]).total_seconds() < 60
    assert 1 <= _most_at_once(attempts) <= 2
    assert limited_done_then <= 60
    pending = "SELECT count(*) FROM jobs WHERE status = 'pending' AND rate_key = :key"
    assert _count(engine, pending, key=LIMITED) == 240
    assert (view.in_flight, view.started_last_minute, view.pending) == (0, 60, 240)
    assert (view.concurrency_limit, view.per_minute_limit) == (2, 60)


# ---------------------------------------------------------------- a site that pushes back


class _PushyHandler(BaseHTTPRequestHandler):
    """The first request of all gets 429 with Retry-After; every later one a page."""

    server: _PushySite

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.hits.append(time.time())
            first = len(self.server.hits) == 1
        status, body = (429, b"slow down") if first else (200, b"<title>ok</title>")
        self.send_response(status)
        if first:
            self.send_header("Retry-After", str(RETRY_AFTER_S))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _PushySite(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PushyHandler)
        self.hits: list[float] = []
        self.lock = threading.Lock()


RETRY_AFTER_S = 3


@pytest.fixture
def pushy_site() -> Iterator[_PushySite]:
    site = _PushySite()
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    yield site
    site.shutdown()
    site.server_close()


def _view(engine: Engine, key: str) -> sa.Row[object] | None:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT * FROM rate_limits WHERE key = :key"), {"key": key}
        ).one_or_none()


def test_a_retry_after_pauses_the_whole_key_and_successes_bring_it_back(
    engine: Engine, database_url: str, tmp_path: Path, pushy_site: _PushySite
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=4))
    port = pushy_site.server_address[1]
    jobs = [NewJob("http_get", {"url": f"http://127.0.0.1:{port}/p{i}"}) for i in range(4)]
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
    env = ENV | {
        "SCRAPEFLEET_RATE_LIMITS": json.dumps({"127.0.0.1": {"concurrency": 1}}),
        "SCRAPEFLEET_BACKOFF_BASE_S": "0.1",
    }
    fleet = LocalFleet(database_url, tmp_path / "state", ["h1"], env=env)
    try:
        fleet.start()
        paused = wait_for(
            lambda: (v := _view(engine, "127.0.0.1")) is not None and v.paused_until and v,
            scaled(30),
            "the key paused after the 429",
        )
        done = "SELECT count(*) FROM jobs WHERE status = 'completed' AND id = ANY(:ids)"
        wait_for(lambda: _count(engine, done, ids=ids) == 4, scaled(30), "every page fetched")
        recovered = wait_for(
            lambda: (v := _view(engine, "127.0.0.1")) is not None and v.factor == 1 and v,
            scaled(10),
            "the key back to full pace",
        )
    finally:
        fleet.stop()

    first, *later = pushy_site.hits
    # Not one request of the key's four jobs reached the site before its Retry-After passed,
    # though three of them had never been tried.
    assert len(later) == 4 and min(later) >= first + RETRY_AFTER_S - 0.05, (first, later)
    assert paused.factor == 0.5 and paused.concurrency_limit == 1
    assert recovered.paused_until is None
