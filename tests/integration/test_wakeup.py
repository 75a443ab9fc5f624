"""The producer's wake-up (producer.wakeup) on a real PostgreSQL: a NOTIFY after a quiet spell
wakes at once, one close behind a wake waits the debounce, and a burst costs one wake."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.constants import CHANNEL_FINISHED
from scrapefleet.producer.wakeup import QUIET_DEBOUNCES, WakeListener, pause_before_wake
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_a_notify_waits_the_debounce_only_while_wakes_follow_each_other() -> None:
    quiet_s = QUIET_DEBOUNCES * 0.005
    assert pause_before_wake(last_wake_s=-float("inf"), now_s=5.0, debounce_s=0.005) == 0
    assert pause_before_wake(last_wake_s=10.0, now_s=10.001 + quiet_s, debounce_s=0.005) == 0
    assert pause_before_wake(last_wake_s=10.0, now_s=10.002, debounce_s=0.005) == 0.005
    assert pause_before_wake(last_wake_s=10.0, now_s=10.0 + quiet_s / 2, debounce_s=0.005) == 0.005


def notify(engine: Engine) -> None:
    with engine.begin() as conn:
        channel = conn.execute(sa.text("SELECT fleet_channel(:c)"), {"c": CHANNEL_FINISHED})
        conn.execute(sa.text("SELECT pg_notify(:c, 'test')"), {"c": channel.scalar_one()})


def test_a_lone_notify_wakes_at_once_and_a_burst_right_after_it_wakes_once_more(
    engine: Engine, database_url: str
) -> None:
    spacing_s = scaled(2.0)  # the debounce; the quiet spell is QUIET_DEBOUNCES of them
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
        assert wakes[1] - wakes[0] >= spacing_s  # debounced: not at once
    finally:
        stopping.set()
        listener.join(5)
    assert len(wakes) == 2, wakes  # the five NOTIFYs of the burst: one wake
