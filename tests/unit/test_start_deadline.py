"""A start deadline that gives back the time its process was paused
(consumer.browser.start_deadline)."""

from __future__ import annotations

import pytest

from scrapefleet.consumer.browser.start_deadline import STALL_S, RunningDeadline


def test_a_paused_sleep_is_given_back_and_slowness_is_not() -> None:
    deadline = RunningDeadline.after(30.0, now=100.0)
    deadline.slept(0.1, started=101.0, ended=101.1 + STALL_S / 2)  # a busy host: counts
    assert deadline.left(102.0) == 28.0 and deadline.given_back_s == 0.0
    deadline.slept(0.1, started=102.0, ended=192.1)  # SIGSTOPped for 90 s: given back
    assert deadline.given_back_s == 90.0
    assert deadline.left(192.1) == pytest.approx(27.9)  # as if 2.1 s had passed, not 92.1
