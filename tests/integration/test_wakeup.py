"""The producer's wake-up (producer.wakeup) on a real PostgreSQL: at most one wake per spacing,
the first NOTIFY after a quiet spell at once, a burst's rest together when the spell ends."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.constants import CHANNEL_FINISHED
from scrapefleet.producer.wakeup import WakeListener, pause_before_wake
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_a_notify_waits_only_for_what_is_left_of_the_spacing() -> None:
    assert pause_before_wake(last_wake_s=-float("inf"), now_s=5.0, spacing_s=0.005) == 0
    assert pause_before_wake(last_wake_s=10.0, now_s=10.002, spacing_s=0.005) == pytest.approx(
        0.003
    )
    assert pause_before_wake(last_wake_s=10.0, now_s=10.5, spacing_s=0.005) == 0


def notify(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_notify(:c, 'test')"), {"c": CHANNEL_FINISHED})


def test_a_lone_notify_wakes_at_once_and_a_burst_after_it_wakes_once_more(
    engine: Engine, database_url: str
) -> None:
    spacing_s = scaled(2.0)
    wakes: list[float] = []
    stopping = threading.Event()
    listener = WakeListener(
        database_url,
        lambda: wakes.append(time.monotonic()),
        debounce_s=spacing_s,
        retry_s=1.0,
        stopping=stopping,
    )
    listener.start()
    try:
        wait_for(listener.listening.is_set, what="LISTEN in place")
        sent = time.monotonic()
        notify(engine)
        wait_for(lambda: len(wakes) == 1, what="the first wake")
        # At once: a trailing debounce would have waited the whole spacing first.
        assert wakes[0] - sent < spacing_s
        for _ in range(5):
            notify(engine)
        wait_for(lambda: len(wakes) == 2, what="the burst's wake")
        assert wakes[1] - wakes[0] >= spacing_s  # not before the spacing was over
    finally:
        stopping.set()
        listener.join(5)
    assert len(wakes) == 2, wakes  # the five NOTIFYs of the burst: one wake
