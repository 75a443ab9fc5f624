"""Shared set-up of the browser-options and network-evidence tests: one warm session pool on
the session's shared stack, and jobs run through the consumer's own runner."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common.browser.options import NO_OPTIONS, BrowserOptions
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.artifacts import capture_into
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.runner import Outcome, run_job
from tests.browser.evidence_site import EvidenceSite

_IDS = itertools.count(1000)


@pytest.fixture(scope="module")
def evidence_site() -> Iterator[EvidenceSite]:
    with EvidenceSite() as running:
        yield running


@pytest.fixture(scope="module")
def job_pool(stack: BrowserStack) -> Iterator[SessionPool]:
    """One slot: the jobs of a module run one after another in one warm browser, each in a
    fresh user context, as on a consumer."""
    with SessionPool(stack.new_driver, 1) as pool:
        yield pool


def run(
    pool: SessionPool,
    kind: str,
    payload: dict[str, Any],
    artifacts_dir: Path | None = None,
    defaults: BrowserOptions = NO_OPTIONS,
) -> Outcome:
    job = ClaimedJob(
        id=next(_IDS),
        kind=kind,
        payload=payload,
        attempt=1,
        max_attempts=3,
        lock_key=None,
        needs_browser=True,
    )
    capture = capture_into(artifacts_dir) if artifacts_dir is not None else None
    return run_job(job, lease=pool.lease, capture_failure=capture, browser_defaults=defaults)
