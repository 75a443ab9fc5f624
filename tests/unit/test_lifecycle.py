"""The daemons' lifecycle: its transitions, its drain bound, and signals handed to a thread.

No database and no subprocess: the signals are sent to this very process, after StopSignals
has replaced the handlers, and the old handlers are checked to be back afterwards.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from scrapefleet.common.runtime.lifecycle import (
    TRANSITIONS,
    DaemonState,
    IllegalTransition,
    Lifecycle,
    StopKind,
    StopSignals,
    stop_for_signal,
    transition,
)
from tests.waiting import scaled, wait_for

pytestmark = pytest.mark.timeout(20)

S = DaemonState


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(drain_timeout_s: float = 30.0, clock: FakeClock | None = None) -> Lifecycle:
    lifecycle = Lifecycle(
        "test daemon", drain_timeout_s=drain_timeout_s, clock=clock or FakeClock()
    )
    assert lifecycle.started()
    return lifecycle


# ---------------------------------------------------------------- the table


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.STARTING, S.RUNNING),
        (S.STARTING, S.DRAINING),
        (S.STARTING, S.STOPPED),
        (S.RUNNING, S.DRAINING),
        (S.DRAINING, S.STOPPED),
    ],
)
def test_allowed_transitions(current: DaemonState, target: DaemonState) -> None:
    assert transition(current, target) is target


ILLEGAL = sorted(set(itertools.product(S, S)) - TRANSITIONS)


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_every_other_transition_is_refused(current: DaemonState, target: DaemonState) -> None:
    with pytest.raises(IllegalTransition, match=f"{current} -> {target}"):
        transition(current, target)


def test_the_refused_ones_include_going_back_and_skipping_the_drain() -> None:
    assert (S.STOPPED, S.RUNNING) in ILLEGAL and (S.DRAINING, S.RUNNING) in ILLEGAL
    assert (S.RUNNING, S.STOPPED) in ILLEGAL  # a running daemon drains before it stops


def test_first_signal_is_warm_every_later_one_cold() -> None:
    assert [stop_for_signal(n) for n in (1, 2, 3)] == [StopKind.WARM, StopKind.COLD, StopKind.COLD]


# ---------------------------------------------------------------- the object


def test_a_full_life() -> None:
    changes: list[DaemonState] = []
    lifecycle = Lifecycle("test daemon", drain_timeout_s=30.0, clock=FakeClock())
    lifecycle.on_change(lambda: changes.append(lifecycle.state))
    assert lifecycle.state is S.STARTING and not lifecycle.is_running
    assert lifecycle.started() and lifecycle.is_running and not lifecycle.stopping
    assert lifecycle.request_stop("because")
    assert lifecycle.state is S.DRAINING and lifecycle.stopping and not lifecycle.cold
    assert lifecycle.reason == "because" and lifecycle.stop_event.is_set()
    assert not lifecycle.request_stop("again"), "a second request changes nothing"
    assert lifecycle.reason == "because" and not lifecycle.cold
    lifecycle.stopped()
    lifecycle.stopped()  # idempotent
    assert lifecycle.state is S.STOPPED and not lifecycle.cold
    assert changes == [S.RUNNING, S.DRAINING, S.STOPPED]


def test_illegal_moves_of_the_object_are_refused() -> None:
    lifecycle = running()
    with pytest.raises(IllegalTransition):
        lifecycle.started()
    with pytest.raises(IllegalTransition):
        lifecycle.stopped()  # RUNNING -> STOPPED skips the drain
    lifecycle.request_stop("x")
    lifecycle.stopped()
    with pytest.raises(IllegalTransition):
        lifecycle.started()
    assert not lifecycle.request_stop("late") and not lifecycle.request_cold_stop("late")
    assert lifecycle.state is S.STOPPED


def test_a_stop_during_the_start_wins() -> None:
    lifecycle = Lifecycle("test daemon", drain_timeout_s=1.0)
    assert lifecycle.request_stop("early")
    assert not lifecycle.started()
    assert lifecycle.state is S.DRAINING


def test_a_failed_start_stops() -> None:
    lifecycle = Lifecycle("test daemon", drain_timeout_s=1.0)
    lifecycle.stopped()
    assert lifecycle.state is S.STOPPED


def test_cold_stop_drains_first_and_is_cold_once() -> None:
    lifecycle = running()
    assert lifecycle.request_cold_stop("now")
    assert lifecycle.state is S.DRAINING and lifecycle.cold and lifecycle.reason == "now"
    assert not lifecycle.request_cold_stop("again")
    assert lifecycle.drain_left_s() == 0.0


def test_the_drain_turns_cold_at_its_deadline() -> None:
    clock = FakeClock()
    lifecycle = running(drain_timeout_s=5.0, clock=clock)
    lifecycle.request_stop("warm")
    clock.now += 4.9
    assert not lifecycle.cold and lifecycle.drain_left_s() == pytest.approx(0.1)
    clock.now += 0.2
    assert lifecycle.cold and lifecycle.drain_left_s() == 0.0
    assert lifecycle.state is S.DRAINING  # cold is a way of draining, not a state


def test_drain_until_returns_when_done_or_when_cold() -> None:
    clock = FakeClock()
    lifecycle = running(drain_timeout_s=5.0, clock=clock)
    lifecycle.request_stop("warm")
    checks = iter([False, False, True])
    assert lifecycle.drain_until(lambda: next(checks), poll_s=0.001)

    def never_done() -> bool:
        clock.now += 1.0  # each look costs a second of the drain
        return False

    assert not lifecycle.drain_until(never_done, poll_s=0.001)
    assert lifecycle.cold


def test_wait_wakes_at_once_on_a_stop_from_another_thread() -> None:
    lifecycle = running()
    ready = threading.Event()

    def stop_soon() -> None:
        ready.wait()
        lifecycle.request_stop("from a thread")

    thread = threading.Thread(target=stop_soon)
    thread.start()
    started = time.monotonic()
    ready.set()
    assert lifecycle.wait(scaled(10))
    assert time.monotonic() - started < scaled(5)
    thread.join()
    assert lifecycle.wait(0), "once stopping, a wait returns at once"


def test_wait_cold_wakes_on_a_cold_stop() -> None:
    lifecycle = running(drain_timeout_s=60.0)
    lifecycle.request_stop("warm")
    assert not lifecycle.wait_cold(0.01)
    timer = threading.Timer(0.05, lifecycle.request_cold_stop, args=("cold",))
    timer.start()
    started = time.monotonic()
    assert lifecycle.wait_cold(scaled(10))
    assert time.monotonic() - started < scaled(5)
    timer.join()


# ---------------------------------------------------------------- signals


@pytest.fixture
def previous_handlers() -> Iterator[tuple[object, socket.socket]]:
    """A SIGTERM handler and a wakeup fd of the test's own, to see both put back."""
    seen: list[int] = []

    def own_handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    old_term = signal.signal(signal.SIGTERM, own_handler)
    old_fd = signal.set_wakeup_fd(writer.fileno())
    try:
        yield own_handler, writer
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGTERM, old_term)
        reader.close()
        writer.close()


def test_signals_move_the_lifecycle_from_a_thread_and_the_old_handlers_come_back(
    previous_handlers: tuple[object, socket.socket],
) -> None:
    own_handler, own_writer = previous_handlers
    int_handler = signal.getsignal(signal.SIGINT)
    lifecycle = running()
    with StopSignals(lifecycle) as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: lifecycle.state is S.DRAINING, 5, "the first SIGTERM to drain")
        assert not lifecycle.cold and lifecycle.reason == "received SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: a second stop signal
        wait_for(lambda: lifecycle.cold, 5, "the second signal to stop cold")
        assert lifecycle.reason == "received SIGTERM"  # why it stops; the log says why cold
        assert signals.received == 2
    assert signal.getsignal(signal.SIGTERM) is own_handler
    assert signal.getsignal(signal.SIGINT) is int_handler
    assert signal.set_wakeup_fd(own_writer.fileno()) == own_writer.fileno()


def test_the_handler_takes_no_lock(previous_handlers: tuple[object, socket.socket]) -> None:
    """While this (the main) thread holds the lifecycle's own lock, a signal arrives: a handler
    that moved the lifecycle itself would deadlock here; the hand-off thread waits instead."""
    lifecycle = running()
    with StopSignals(lifecycle):
        with lifecycle._lock:  # the lock a handler would need
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes: the Python-level handler runs among them
                pass
            assert lifecycle.state is S.RUNNING
        wait_for(lambda: lifecycle.state is S.DRAINING, 5, "the hand-off once the lock is free")
    assert not lifecycle.cold


def test_other_handled_signals_do_not_count(
    previous_handlers: tuple[object, socket.socket],
) -> None:
    usr1: list[int] = []
    old_usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: usr1.append(signum))
    try:
        lifecycle = running()
        with StopSignals(lifecycle) as signals:
            os.kill(os.getpid(), signal.SIGUSR1)  # also written to the wakeup fd, first
            os.kill(os.getpid(), signal.SIGTERM)
            wait_for(lambda: lifecycle.stopping, 5, "SIGTERM to drain")
            assert signals.received == 1 and not lifecycle.cold
        wait_for(lambda: usr1, 5, "the test's own SIGUSR1 handler to run")
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)


def test_installing_outside_the_main_thread_is_refused() -> None:
    errors: list[BaseException] = []

    def install() -> None:
        try:
            StopSignals(running()).install()
        except ValueError as exc:
            errors.append(exc)

    thread = threading.Thread(target=install)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])
