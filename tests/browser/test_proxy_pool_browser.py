"""A browser attempt through a leased pool proxy, on the real stack: the runner puts the leased
proxy (credentials included) where the pool was, Chromium goes out through it (its 407
answered), the site sees the proxy's exit address; a block page through a burnt exit is the
proxy's block, and nothing the attempt leaves carries the password."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.block_detection import NO_RULES
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.runner import Outcome, run_job
from tests.browser.job_browser_helpers import job_pool  # noqa: F401
from tests.integration.exit_proxies import BlockingSite, ExitProxy

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

SECRET = "br0wser-pw"
GOOD, BURNT = "127.0.0.2", "127.0.0.3"
_IDS = itertools.count(5000)


@pytest.fixture(scope="module")
def exits() -> Iterator[dict[str, ExitProxy]]:
    proxies = {a: ExitProxy(a, "scraper", SECRET) for a in (GOOD, BURNT)}
    for proxy in proxies.values():
        proxy.__enter__()
    yield proxies
    for proxy in proxies.values():
        proxy.__exit__()


def _run(pool: SessionPool, url: str, proxy: ExitProxy, proxy_id: int) -> Outcome:
    job = ClaimedJob(
        id=next(_IDS),
        kind="fetch_page",
        payload={"url": url, "proxy_pool": "res"},
        attempt=1,
        max_attempts=3,
        lock_key=None,
        needs_browser=True,
        proxy_id=proxy_id,
        proxy_url=proxy.url,  # what the claim reads for the attempt (store.proxy_for_attempt)
        proxy_block_statuses=(403, 429),
    )
    # The host has no block rules: the pool's own statuses make the 403 the proxy's block.
    return run_job(job, lease=pool.lease, block_rules=NO_RULES)


def test_a_browser_job_goes_out_through_its_leased_proxy_and_a_burnt_exit_is_its_block(
    job_pool: SessionPool,  # noqa: F811
    exits: dict[str, ExitProxy],
) -> None:
    with BlockingSite({BURNT: 0}) as site:
        done = _run(job_pool, site.url("/a"), exits[GOOD], 1)
        assert done.status == "completed", done.error
        assert done.result is not None and done.result["title"] == "Welcome"
        assert site.log.requests[GOOD] >= 1 and exits[GOOD].challenged >= 1

        blocked = _run(job_pool, site.url("/b"), exits[BURNT], 2)
        assert blocked.status == "blocked", blocked.error
        assert site.log.blocked[BURNT] >= 1
        assert "127.0.0.1" not in site.log.requests  # nothing went around the proxies
    for text in (done.error, blocked.error, blocked.reason, repr(blocked), str(done.result)):
        assert SECRET not in (text or "")
