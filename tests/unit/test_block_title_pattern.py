"""The operator's block_title_pattern against a page's title: bounded in time and length, and
never holding the GIL while it runs (stdlib ``re`` held it 9.4 s on a 20,000-character title,
and every other thread of the consumer, its heartbeats included, stopped with it)."""

from __future__ import annotations

import threading
import time

import pytest

from scrapefleet.common.actions.bounded_regex import PatternTimeout
from scrapefleet.common.constants import BLOCK_TITLE_MAX_CHARS
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.actions.block_detection import BlockRules, block_reason
from tests.waiting import scaled

pytestmark = pytest.mark.timeout(120)


def _rules(pattern: str) -> BlockRules:
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:1/none")
    return BlockRules.from_settings(settings.model_copy(update={"block_title_pattern": pattern}))


def test_a_catastrophic_pattern_times_out_and_lets_other_threads_run() -> None:
    rules = _rules(r"(a|aa)+$")
    ticks = [0]
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.01)

    beating = threading.Thread(target=heartbeat, daemon=True)
    beating.start()
    try:
        before = ticks[0]
        started = time.monotonic()
        with pytest.raises(PatternTimeout, match="block_title_pattern"):
            block_reason(rules, status=200, title="a" * 36 + "!", selector_matched=False)
        elapsed = time.monotonic() - started
        during = ticks[0] - before
    finally:
        stop.set()
        beating.join(5)
    assert elapsed < scaled(5), elapsed
    # ~100 ticks a second when the GIL is free; none at all while stdlib re held it.
    assert during >= 10, during


def test_a_long_title_is_searched_only_at_its_start() -> None:
    rules = _rules(r"(?i).*denied.*blocked")
    title = "a" * 20_000
    started = time.monotonic()
    assert block_reason(rules, status=200, title=title, selector_matched=False) is None
    assert time.monotonic() - started < scaled(2)
    late = "x" * BLOCK_TITLE_MAX_CHARS + " access denied, blocked"
    assert block_reason(rules, status=200, title=late, selector_matched=False) is None
    early = "Access denied, you are blocked " + "x" * 20_000
    assert "matches the block pattern" in (
        block_reason(rules, status=200, title=early, selector_matched=False) or ""
    )


def test_the_setting_is_checked_by_the_engine_that_runs_it() -> None:
    with pytest.raises(ValueError, match="block_title_pattern"):
        Settings(database_url="postgresql://nobody@127.0.0.1:1/none", block_title_pattern="(")
    with pytest.raises(ValueError, match="1000 characters"):
        Settings(
            database_url="postgresql://nobody@127.0.0.1:1/none", block_title_pattern="a" * 1001
        )
