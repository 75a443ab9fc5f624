"""Error classes on the real stack: fetch_page jobs through a real Consumer and its own browser
stack against a site on 127.0.0.1 that pushes back. A 404 fails after one attempt (permanent);
a 429 with ``Retry-After: 3`` runs again no sooner than 3 s later (rate_limited); a 403 block
page is handed back without using an attempt until the bound, then fails (blocked). And each
block rule (status, selector, title) on a real page, through the consumer's runner."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.actions.bounded_regex import compile_pattern
from scrapefleet.common.actions.error_classes import ErrorClass
from scrapefleet.common.store import ClaimedJob, NewJob
from scrapefleet.consumer.browser.actions.block_detection import NO_RULES, BlockRules
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.runner import Outcome, run_job
from tests.browser.consumer_helpers import (
    HOST,
    assign_due,
    consumer_settings,
    consumer_thread,
    queue_jobs,
    rows,
)
from tests.browser.job_browser_helpers import job_pool  # noqa: F401
from tests.browser.pushback_site import BLOCK_MARKER, RETRY_AFTER_S, PushbackSite
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CLOCKS_APART_S = 0.02

MAX_BLOCKS = 2


@pytest.fixture
def pushback_site() -> Iterator[PushbackSite]:
    with PushbackSite() as running:
        yield running


def _job(engine: Engine, job_id: int) -> Any:
    return rows(engine, "SELECT * FROM jobs WHERE id = :id", id=job_id)[0]


def _moves(engine: Engine, job_id: int) -> list[tuple[str | None, str, datetime, str | None]]:
    found = rows(
        engine,
        "SELECT from_status, to_status, at, message FROM job_events WHERE job_id = :id ORDER BY id",
        id=job_id,
    )
    return [(r.from_status, r.to_status, r.at, r.message) for r in found]


def _done(engine: Engine, ids: list[int]) -> bool:
    statuses = rows(engine, "SELECT status FROM jobs WHERE id = ANY(:ids)", ids=ids)
    return all(r.status in ("completed", "failed") for r in statuses)


def test_fetch_page_outcomes_by_class(
    engine: Engine, database_url: str, tmp_path: Path, pushback_site: PushbackSite
) -> None:
    settings = consumer_settings(
        tmp_path,
        database_url,
        capacity=2,
        max_blocks_per_job=MAX_BLOCKS,
        block_selector=BLOCK_MARKER,
    )
    site = pushback_site
    jobs = [
        NewJob("fetch_page", {"url": site.url("/gone")}, max_attempts=3),
        NewJob("fetch_page", {"url": site.url("/busy")}, max_attempts=3),
        NewJob("fetch_page", {"url": site.url("/blocked")}, max_attempts=1),
        NewJob(
            "fetch_page",
            {"url": site.url("/blocked"), "wait_for": "#content"},
            max_attempts=1,
        ),
    ]
    with consumer_thread(settings, database_url):
        gone, busy, blocked, blocked_waiting = ids = queue_jobs(engine, jobs)
        wait_for(
            lambda: _done(engine, ids),
            scaled(200),
            "every job to end",
            between=lambda: assign_due(engine),
            poll_s=0.2,
        )

    # A 404: permanent, one attempt although three were allowed.
    row = _job(engine, gone)
    assert (row.status, row.attempts, row.error_class) == ("failed", 1, "permanent")
    assert "HTTP 404" in row.last_error
    assert len(site.hit_times("/gone")) == 1

    # A 429 with Retry-After: 3 -> its next attempt came no sooner than 3 s after the site said
    # so (the backoff alone is 0.1 s here), by the site's own clock: from the request it
    # answered with 429 to the next. (Not by the audit rows: each is stamped when its
    # transaction began, and the one recording the failure begins a moment after the retry
    # time was set, so that gap can read a few milliseconds short of 3 s.)
    row = _job(engine, busy)
    assert (row.status, row.attempts, row.error_class) == ("completed", 2, "rate_limited")
    moves = _moves(engine, busy)
    assert len([m for m in moves if (m[0], m[1]) == ("queued", "processing")]) == 2
    hits = site.hit_times("/busy")
    # Less a clock's worth: the site stamps hits with time.time(), the retry time is set by
    # PostgreSQL's clock, and the two can drift by a few ms over 3 s (2.998 s seen once).
    assert len(hits) == 2 and hits[1] - hits[0] >= RETRY_AFTER_S - CLOCKS_APART_S, hits

    # A block page (403 + marker), with and without a wait: handed back MAX_BLOCKS times, no
    # attempt used (max_attempts is 1), then failed with class blocked.
    for job_id in (blocked, blocked_waiting):
        row = _job(engine, job_id)
        assert (row.status, row.error_class, row.blocks) == ("failed", "blocked", MAX_BLOCKS)
        assert (row.attempts, row.blocked_on_host) == (0, HOST)
        assert f"block selector '{BLOCK_MARKER}' matched" in row.last_error
        assert f"(blocked {MAX_BLOCKS} times)" in row.last_error
        messages = [m for f, _, _, m in _moves(engine, job_id) if f == "processing"]
        assert len(messages) == MAX_BLOCKS
        assert all(m.startswith("blocked: ") for m in messages)
        assert row.artifacts and row.artifacts.get("screenshot")  # the block page, kept
    assert len(site.hit_times("/blocked")) == 2 * MAX_BLOCKS

    failures = {
        r.job_id: r.error_class
        for r in rows(engine, "SELECT job_id, error_class FROM recent_failures")
    }
    assert failures == {gone: "permanent", blocked: "blocked", blocked_waiting: "blocked"}


_IDS = itertools.count(5000)


def _fetch(
    pool: SessionPool, url: str, rules: BlockRules, kind: str = "fetch_page", **payload: Any
) -> Outcome:
    job = ClaimedJob(
        id=next(_IDS),
        kind=kind,
        payload={"url": url, **payload},
        attempt=1,
        max_attempts=3,
        lock_key=None,
        needs_browser=True,
    )
    return run_job(job, lease=pool.lease, block_rules=rules)


def test_each_block_rule_on_a_real_page(
    job_pool: SessionPool,  # noqa: F811
    pushback_site: PushbackSite,
) -> None:
    url = pushback_site.url("/blocked")
    by_status = _fetch(job_pool, url, BlockRules(statuses=frozenset({403})))
    assert by_status.status == "blocked" and "HTTP 403 is a block status" in (
        by_status.reason or ""
    )
    by_title = _fetch(
        job_pool,
        url,
        BlockRules(title_pattern=compile_pattern("(?i)access denied", "block_title_pattern")),
    )
    assert by_title.status == "blocked" and "'Access denied'" in (by_title.reason or "")
    # Without rules the same page is an HTTP error: transient, retried with backoff.
    plain = _fetch(job_pool, url, NO_RULES)
    assert plain.status == "failed" and plain.error_class is ErrorClass.TRANSIENT
    assert "HTTP 403" in (plain.error or "")
    # A page no rule matches is no block page.
    fine = _fetch(job_pool, pushback_site.url("/page"), BlockRules(selector=BLOCK_MARKER))
    assert fine.status == "completed", fine.error


def test_a_screenshot_of_a_block_page_is_blocked_not_a_result(
    job_pool: SessionPool,  # noqa: F811
    pushback_site: PushbackSite,
    tmp_path: Path,
) -> None:
    """The same rules as fetch_page: a picture of a captcha is no result."""
    out = str(tmp_path)
    by_marker = BlockRules(selector=BLOCK_MARKER)
    blocked = _fetch(
        job_pool, pushback_site.url("/blocked"), by_marker, "screenshot", output_dir=out
    )
    assert blocked.status == "blocked", blocked.error
    assert f"block selector '{BLOCK_MARKER}' matched" in (blocked.reason or "")
    by_title = BlockRules(title_pattern=compile_pattern("(?i)access denied", "block_title_pattern"))
    blocked = _fetch(
        job_pool, pushback_site.url("/blocked"), by_title, "screenshot", output_dir=out
    )
    assert blocked.status == "blocked" and "'Access denied'" in (blocked.reason or "")
    assert not list(tmp_path.iterdir())  # no picture kept of either
    # Without rules the block page is an HTTP error, as before; a page no rule matches is shot.
    plain = _fetch(job_pool, pushback_site.url("/blocked"), NO_RULES, "screenshot", output_dir=out)
    assert plain.status == "failed" and "HTTP 403" in (plain.error or "")
    fine = _fetch(job_pool, pushback_site.url("/page"), by_marker, "screenshot", output_dir=out)
    assert fine.status == "completed", fine.error
    assert len(list(tmp_path.glob("*.png"))) == 1
