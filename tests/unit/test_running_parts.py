"""The small objects a running consumer's threads share (consumer.running_state) and the
decisions its parts make (consumer.heartbeat.reported_state), with a fake clock."""

from __future__ import annotations

import threading

import pytest

from scrapefleet.common.runtime.lifecycle import DaemonState
from scrapefleet.consumer.heartbeat import reported_state
from scrapefleet.consumer.poll_schedule import PollSchedule
from scrapefleet.consumer.running_state import (
    HostStateMoved,
    HostStateView,
    StackCounterSet,
    Wakeup,
    wake_after_write,
)

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_events_posted_from_another_thread_reach_the_owner_in_order_and_wake_it() -> None:
    wakeup = Wakeup(None)
    poster = threading.Thread(
        target=lambda: [wakeup.post(HostStateMoved("restarting")), wakeup.post(StackCounterSet(0))]
    )
    poster.start()
    poster.join(10)
    assert wakeup.wait(0)  # woken
    assert wakeup.take_posted() == [HostStateMoved("restarting"), StackCounterSet(0)]
    assert wakeup.take_posted() == []


def test_host_state_view_replaces_whole_and_says_what_it_was() -> None:
    view = HostStateView("active")
    assert view.replace("draining") == "active"
    assert view.value == "draining"


@pytest.mark.parametrize(
    ("polling", "more_queued", "stopping", "wakes"),
    [
        (True, False, False, True),
        (False, False, False, False),
        (False, True, False, True),
        (False, False, True, True),
    ],
)
def test_written_outcomes_wake_the_main_thread_only_when_it_has_a_reason(
    polling: bool, more_queued: bool, stopping: bool, wakes: bool
) -> None:
    assert wake_after_write(polling=polling, more_queued=more_queued, stopping=stopping) is wakes
    wakeup = Wakeup(PollSchedule(5.0) if polling else None, FakeClock())
    wakeup.outcomes_written(more_queued=more_queued, stopping=stopping)
    assert wakeup.wait(0) is wakes


def test_claims_on_schedule_follow_the_poll_schedule_on_the_given_clock() -> None:
    clock = FakeClock()
    wakeup = Wakeup(PollSchedule(5.0), clock)
    claims: list[float] = []

    def claim() -> int:
        claims.append(clock.now)
        return 0

    assert wakeup.on_schedule(claim) == (0, 5.0)  # the first claim at once
    clock.now += 1
    assert wakeup.on_schedule(claim) == (0, 4.0)  # not due: not claimed
    wakeup.claim_soon()
    assert wakeup.on_schedule(claim)[0] == 0 and claims == [100.0, 101.0]


def test_a_failed_claim_on_schedule_is_tried_again_at_once() -> None:
    clock = FakeClock()
    wakeup = Wakeup(PollSchedule(5.0), clock)

    def broken() -> int:
        raise RuntimeError("database away")

    with pytest.raises(RuntimeError):
        wakeup.on_schedule(broken)
    assert wakeup.on_schedule(lambda: 2) == (2, 5.0)


@pytest.mark.parametrize(
    ("daemon", "stopping", "db_state", "maintenance", "reported"),
    [
        (DaemonState.STOPPED, True, "active", None, "offline"),
        (DaemonState.RUNNING, True, "active", None, "draining"),
        (DaemonState.RUNNING, False, "offline", None, "active"),
        (DaemonState.RUNNING, False, "no such state", None, "active"),
        (DaemonState.RUNNING, False, "active", "restarting", "restarting"),
        (DaemonState.RUNNING, False, "disabled", "restarting", "disabled"),
        (DaemonState.RUNNING, False, "draining", None, "draining"),
    ],
)
def test_the_reported_host_state(
    daemon: DaemonState, stopping: bool, db_state: str, maintenance: str | None, reported: str
) -> None:
    assert reported_state(daemon, stopping, db_state, maintenance) == reported
