"""A start deadline that gives back the time its process was paused
(consumer.browser.stack.start_deadline)."""

from __future__ import annotations

import os

import pytest

from scrapefleet.consumer.browser.stack.host_needs import read_line as _read_line
from scrapefleet.consumer.browser.stack.process_control import XVFB_READY_TIMEOUT_S
from scrapefleet.consumer.browser.stack.start_deadline import STALL_S, RunningDeadline, paused_past


def test_a_paused_sleep_is_given_back_and_slowness_is_not() -> None:
    deadline = RunningDeadline.after(30.0, now=100.0)
    deadline.slept(0.1, started=101.0, ended=101.1 + STALL_S / 2)  # a busy host: counts
    assert deadline.left(102.0) == 28.0 and deadline.given_back_s == 0.0
    deadline.slept(0.1, started=102.0, ended=192.1)  # SIGSTOPped for 90 s: given back
    assert deadline.given_back_s == 90.0
    assert deadline.left(192.1) == pytest.approx(27.9)  # as if 2.1 s had passed, not 92.1


def test_a_wait_that_overran_its_limit_by_a_pause_is_told_from_one_that_did_not() -> None:
    assert paused_past(60.0, started=0.0, ended=150.0) == 90.0  # paused 90 s past the limit
    assert paused_past(60.0, started=0.0, ended=60.0 + STALL_S / 2) == 0.0  # just late
    assert paused_past(60.0, started=0.0, ended=3.0) == 0.0  # failed early: the Grid's answer


class _PausedWaits:
    """A clock and a select stand-in: the process is paused (SIGSTOP) for ``pause_s`` in the
    ``pause_at``-th wait, and Xvfb writes its display number ``answer_after_s`` of running time
    after the start."""

    def __init__(self, write_fd: int, pause_at: int, pause_s: float, answer_after_s: float):
        self.now = 1000.0
        self.running_s = 0.0
        self.waits = 0
        self.write_fd, self.pause_at, self.pause_s = write_fd, pause_at, pause_s
        self.answer_after_s = answer_after_s

    def clock(self) -> float:
        return self.now

    def wait(self, fd: int, timeout_s: float) -> bool:
        self.waits += 1
        if self.waits == self.pause_at:
            self.now += self.pause_s + timeout_s
            self.running_s += timeout_s
            return False
        if self.running_s + timeout_s >= self.answer_after_s:
            os.write(self.write_fd, b"99\n")
            return True
        self.now += timeout_s
        self.running_s += timeout_s
        return False


def _read_answer(pause_at: int, pause_s: float, answer_after_s: float) -> bytes:
    read_fd, write_fd = os.pipe()
    try:
        waits = _PausedWaits(write_fd, pause_at, pause_s, answer_after_s)
        return _read_line(read_fd, XVFB_READY_TIMEOUT_S, clock=waits.clock, wait=waits.wait)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_xvfbs_start_deadline_is_rearmed_after_a_pause() -> None:
    # Paused for 90 s early in the wait; Xvfb answers after 5 s of running time: no failure.
    assert _read_answer(pause_at=3, pause_s=90.0, answer_after_s=5.0) == b"99\n"
    # Without the pause the same answer comes in time too; an Xvfb that never answers within
    # the deadline's running time is still given up on.
    assert _read_answer(pause_at=0, pause_s=0.0, answer_after_s=5.0) == b"99\n"
    assert _read_answer(pause_at=3, pause_s=90.0, answer_after_s=XVFB_READY_TIMEOUT_S + 5) == b""
