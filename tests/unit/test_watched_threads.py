"""Every thread a session pool starts is watched: its keep-alive thread and its workers, when
they die, are a death the consumer hears of (common.runtime.side_threads), not a thread gone
without a word."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scrapefleet.common.runtime.side_threads import SideThreads, ThreadDied
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(30)


def _no_driver() -> Any:
    raise AssertionError("no session is asked for")


def test_a_dead_keep_alive_thread_of_a_session_pool_is_noticed() -> None:
    deaths: list[ThreadDied] = []
    threads = SideThreads(deaths.append, lambda: False)
    ticks = 0

    def clock() -> float:
        nonlocal ticks
        ticks += 1
        if ticks > 1:  # the pool's own first reading, then the keep-alive's
            raise RuntimeError("clock broke")
        return 0.0

    pool = SessionPool(_no_driver, 1, keepalive_s=0.01, clock=clock, threads=threads)
    try:
        wait_for(lambda: bool(deaths), what="the keep-alive thread's death noticed")
    finally:
        pool.close()
    assert deaths[0] == ThreadDied("session-keepalive", "RuntimeError: clock broke")
    assert threads.died == deaths[0]


def test_a_dead_task_of_a_watched_pool_is_noticed_and_still_raised_to_its_future() -> None:
    deaths: list[ThreadDied] = []
    threads = SideThreads(deaths.append)
    pool = threads.executor("session-pool", 1)
    try:

        def broken() -> None:
            raise ValueError("task broke")

        future = pool.submit(broken)
        with pytest.raises(ValueError, match="task broke"):
            future.result(timeout=10)
        assert (
            pool.submit(lambda: threading.current_thread().name)
            .result(10)
            .startswith("session-pool")
        )
    finally:
        pool.shutdown()
    assert deaths == [ThreadDied("session-pool", "ValueError: task broke")]


def test_a_task_that_returns_is_no_death() -> None:
    deaths: list[ThreadDied] = []
    threads = SideThreads(deaths.append)
    watched = threads.watch("helper", lambda x: x + 1)
    assert watched(1) == 2
    assert deaths == [] and threads.died is None
