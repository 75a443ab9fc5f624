"""Side threads watched (common.runtime.side_threads) and one thread carrying out what others post
(common.runtime.serial_thread): real threads, no I/O."""

from __future__ import annotations

import logging
import threading

import pytest

from scrapefleet.common.runtime.serial_thread import SerialThread
from scrapefleet.common.runtime.side_threads import SideThreads, ThreadDied
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(30)


def _raise() -> None:
    raise RuntimeError("injected failure")


def test_a_thread_that_raises_is_named_in_one_line_and_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deaths: list[ThreadDied] = []
    threads = SideThreads(deaths.append, stopping=lambda: False)
    threads.start("heartbeat-h1", _raise)
    threads.start("listen-h1", _raise)
    wait_for(lambda: threads.died is not None and len(caplog.records) >= 2, 5, "two deaths")
    threads.join(5)
    assert len(deaths) == 1 and deaths[0].name in ("heartbeat-h1", "listen-h1")
    assert deaths[0].error == "RuntimeError: injected failure"
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "thread heartbeat-h1 died: RuntimeError: injected failure" in " ".join(lines)


def test_a_lasting_thread_that_returns_while_running_dies_a_helper_does_not() -> None:
    stopping = threading.Event()
    deaths: list[ThreadDied] = []
    threads = SideThreads(deaths.append, stopping=stopping.is_set)
    threads.start("next-stack-h1", lambda: None, lasting=False).join(5)
    assert threads.died is None
    threads.start("recorder-h1", lambda: None)
    threads.join(5)
    assert deaths == [ThreadDied("recorder-h1", "returned while the consumer was running")]
    stopping.set()
    quiet = SideThreads(deaths.append, stopping=stopping.is_set)
    quiet.start("janitor", lambda: None)
    quiet.join(5)
    assert quiet.died is None


def test_posted_work_runs_in_order_on_the_thread_and_raises_in_the_poster() -> None:
    serial = SerialThread("stack-h1", SideThreads())
    ran: list[tuple[int, str]] = []
    serial.run(lambda: ran.append((0, threading.current_thread().name)))  # not started: here
    serial.start()
    for i in range(1, 4):
        serial.run(lambda i=i: ran.append((i, threading.current_thread().name)), wait=i == 3)
    assert ran == [(0, "MainThread"), (1, "stack-h1"), (2, "stack-h1"), (3, "stack-h1")]
    with pytest.raises(RuntimeError, match="injected"):
        serial.run(_raise)
    serial.run(lambda: ran.append((4, threading.current_thread().name)))
    assert ran[-1] == (4, "stack-h1"), "an error told to its poster does not end the thread"
    serial.stop(5)
    serial.run(lambda: ran.append((5, threading.current_thread().name)))
    assert ran[-1] == (5, "MainThread"), "once it is gone, work runs in the poster"


def test_work_posted_to_a_thread_that_died_runs_in_the_poster() -> None:
    deaths: list[ThreadDied] = []
    serial = SerialThread("stack-h1", SideThreads(deaths.append, stopping=lambda: False))
    serial.start()
    gate = threading.Event()

    def die_later() -> None:
        gate.wait(5)
        raise RuntimeError("injected failure")

    serial.run(die_later, wait=False)  # nobody waits for it: its error ends the thread
    ran: list[str] = []
    gate.set()
    serial.run(lambda: ran.append(threading.current_thread().name))
    assert ran == ["MainThread"]
    assert deaths == [ThreadDied("stack-h1", "RuntimeError: injected failure")]
