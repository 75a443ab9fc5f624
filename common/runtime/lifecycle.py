"""One lifecycle for both daemons: STARTING -> RUNNING -> DRAINING -> STOPPED.

    STARTING --started--> RUNNING --stop--> DRAINING --drained / given up--> STOPPED
        |                                      ^
        +------------------stop----------------+          (a stop asked for during the start)
        +------------------failed to start-------------------------------------> STOPPED

A stop is warm at first: the daemon takes no new work and lets what it has in hand finish. It
turns cold on a second stop signal, or when the drain outlasts ``drain_timeout_s``: the daemon
stops waiting for work in progress and exits (the consumer hands its in-flight jobs to the
same recovery a crash gets). Cold is a property of the DRAINING state, not a fifth state: the
daemon does the same things in the same order, only without waiting.

Shutdown is a state the loops check (``is_running``, ``wait``, ``wait_cold``), never an
exception that an ``except Exception`` could swallow.

Signals are handed off without doing anything in the handler: CPython's C-level handler writes
the signal number to a socketpair (``signal.set_wakeup_fd``) and a small thread reads it and
moves the lifecycle. A Python-level handler runs on the main thread between two bytecodes,
possibly while that thread holds a lock (an Event's, the logging module's): anything that takes
a lock there can deadlock, so the handler installed here does nothing at all.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from enum import StrEnum
from types import FrameType, TracebackType
from typing import Any, Final

from scrapefleet.common.errors import ScrapefleetError

log = logging.getLogger(__name__)

# The producer's drain: the cycle in progress and the background jobs finish. A cycle is a
# probe round (probe_timeout_s) and a few statements; systemd's TimeoutStopSec for the producer
# is 30 s, so the drain gives up first and the exit is still ours.
PRODUCER_DRAIN_TIMEOUT_S: Final = 20.0
DRAIN_POLL_S: Final = 0.05  # drain_until looks at its condition this often
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_QUIT: Final = 0  # not a signal number: tells the hand-off thread to end


class DaemonState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


TRANSITIONS: Final[frozenset[tuple[DaemonState, DaemonState]]] = frozenset(
    {
        (DaemonState.STARTING, DaemonState.RUNNING),  # started
        (DaemonState.STARTING, DaemonState.DRAINING),  # a stop came before the start ended
        (DaemonState.STARTING, DaemonState.STOPPED),  # the start failed
        (DaemonState.RUNNING, DaemonState.DRAINING),  # a stop: signal, idle, caller
        (DaemonState.DRAINING, DaemonState.STOPPED),  # drained, or given up cold
    }
)


class IllegalTransition(ScrapefleetError):
    """A daemon tried a lifecycle step the table does not allow (a bug, never an operator's)."""


class StopKind(StrEnum):
    WARM = "warm"  # finish the work in hand
    COLD = "cold"  # stop waiting for it


def transition(current: DaemonState, target: DaemonState) -> DaemonState:
    """``target`` if the table allows ``current -> target``; else IllegalTransition."""
    if (current, target) not in TRANSITIONS:
        raise IllegalTransition(f"daemon state {current} -> {target} is not allowed")
    return target


def stop_for_signal(signals_seen: int) -> StopKind:
    """The first stop signal drains; any later one is a cold stop."""
    return StopKind.WARM if signals_seen <= 1 else StopKind.COLD


class Lifecycle:
    """The state of one daemon, safe to read and move from any thread (never from a signal
    handler: StopSignals hands signals to a thread).

    ``clock`` is monotonic seconds; tests pass their own to expire a drain without waiting.
    """

    def __init__(
        self,
        name: str,
        *,
        drain_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not drain_timeout_s >= 0:
            raise ValueError(f"drain_timeout_s must be >= 0, not {drain_timeout_s!r}")
        self.name = name
        self.drain_timeout_s = drain_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._state = DaemonState.STARTING
        self._cold = False
        self._reason = ""
        self._drain_deadline = math.inf
        # Events, so that sleeps wake at once and code that takes an Event (the producer's wake
        # listener) can be handed one.
        self._stop_requested = threading.Event()
        self._cold_requested = threading.Event()
        self._listeners: list[Callable[[], None]] = []

    # -- reading ------------------------------------------------------------------------

    @property
    def state(self) -> DaemonState:
        return self._state

    @property
    def reason(self) -> str:
        """Why the daemon stops ("" while it does not)."""
        return self._reason

    @property
    def is_running(self) -> bool:
        return self._state is DaemonState.RUNNING

    @property
    def stopping(self) -> bool:
        """A stop was asked for (DRAINING or STOPPED)."""
        return self._stop_requested.is_set()

    @property
    def cold(self) -> bool:
        """The daemon stops waiting for work in progress: a second signal, a cold stop asked
        for, or a drain past its deadline (which turns it cold here, once)."""
        if (
            not self._cold
            and self._state is DaemonState.DRAINING
            and self._clock() >= self._drain_deadline
        ):
            self.request_cold_stop(f"the drain took longer than {self.drain_timeout_s:g} s")
        return self._cold

    @property
    def stop_event(self) -> threading.Event:
        """Set once a stop is asked for; for code that takes an Event. Do not set it."""
        return self._stop_requested

    def drain_left_s(self) -> float:
        """Seconds before a warm drain turns cold (inf before the drain, 0 once cold)."""
        if self._cold:
            return 0.0
        return max(0.0, self._drain_deadline - self._clock())

    # -- waiting --------------------------------------------------------------------------

    def wait(self, timeout_s: float) -> bool:
        """A running loop's sleep: returns at once when a stop is asked for. True if stopping."""
        return self._stop_requested.wait(timeout_s)

    def wait_cold(self, timeout_s: float) -> bool:
        """A drain's sleep: returns at once on a cold stop, or when the drain deadline passes.
        True if cold."""
        if self.cold:
            return True
        self._cold_requested.wait(max(0.0, min(timeout_s, self.drain_left_s())))
        return self.cold

    def drain_until(self, done: Callable[[], bool], poll_s: float = DRAIN_POLL_S) -> bool:
        """Wait until ``done()``; True if it came, False if the stop turned cold first."""
        while not done():
            if self.wait_cold(poll_s):
                return False
        return True

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (no arguments, in the thread that moved the lifecycle) after every
        change: a daemon wakes its own loops with it."""
        self._listeners.append(callback)

    # -- moving ---------------------------------------------------------------------------

    def started(self) -> bool:
        """STARTING -> RUNNING. False (and no change) when a stop came during the start."""
        with self._lock:
            if self._state is DaemonState.DRAINING:
                return False
            self._state = transition(self._state, DaemonState.RUNNING)
        log.info("%s running", self.name)
        self._notify()
        return True

    def request_stop(self, reason: str) -> bool:
        """Begin a warm drain; True if this call began it (later calls change nothing)."""
        with self._lock:
            if self._state not in (DaemonState.STARTING, DaemonState.RUNNING):
                return False
            self._state = transition(self._state, DaemonState.DRAINING)
            self._reason = reason
            self._drain_deadline = self._clock() + self.drain_timeout_s
            self._stop_requested.set()
        log.info(
            "%s draining (%s): at most %g s for the work in hand",
            self.name,
            reason,
            self.drain_timeout_s,
        )
        self._notify()
        return True

    def request_cold_stop(self, reason: str) -> bool:
        """Stop without waiting for work in progress (draining first if not yet). True if this
        call made the stop cold."""
        self.request_stop(reason)
        with self._lock:
            if self._state is not DaemonState.DRAINING or self._cold:
                return False
            self._cold = True
            self._cold_requested.set()
        log.warning("%s: cold stop (%s): not waiting for work in progress", self.name, reason)
        self._notify()
        return True

    def stopped(self) -> None:
        """-> STOPPED (from DRAINING, or from STARTING when the start failed). Idempotent."""
        with self._lock:
            if self._state is DaemonState.STOPPED:
                return
            self._state = transition(self._state, DaemonState.STOPPED)
            self._stop_requested.set()
        self._notify()

    def _notify(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:  # a listener's bug must not stop the stop
                log.exception("%s: lifecycle listener failed", self.name)


class StopSignals:
    """SIGTERM/SIGINT moving a Lifecycle: the first drains, the second is a cold stop.

    Install from the main thread (``with StopSignals(lifecycle):``); leaving the block puts back
    the handlers and the wakeup fd that were there before. Only one wakeup fd exists per
    process: while installed, a previous one (asyncio's, say) receives nothing.
    """

    def __init__(self, lifecycle: Lifecycle, signals: Iterable[int] = STOP_SIGNALS) -> None:
        self.lifecycle = lifecycle
        self.signals = tuple(signal.Signals(s) for s in signals)
        self.received = 0
        self._old_handlers: dict[signal.Signals, Any] = {}
        self._old_wakeup_fd: int | None = None
        self._reader: socket.socket | None = None
        self._writer: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def install(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("stop signals can be handled only from the main thread")
        if self._thread is not None:
            raise ValueError("stop signals already installed")
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)  # required by set_wakeup_fd: a full buffer drops bytes
        self._thread = threading.Thread(target=self._hand_off, name="stop-signals", daemon=True)
        self._thread.start()
        self._old_wakeup_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for signum in self.signals:
            self._old_handlers[signum] = signal.signal(signum, _do_nothing)
        return self

    def restore(self) -> None:
        """Old handlers and wakeup fd back; the hand-off thread ends. Idempotent."""
        if self._thread is None:
            return
        for signum, handler in self._old_handlers.items():
            # None: a handler set from C, which cannot be put back; the default is closest.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._old_handlers.clear()
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self._old_wakeup_fd = None
        assert self._writer is not None and self._reader is not None
        # A buffer full of signals refuses it: closing the writer ends the reader all the same.
        with contextlib.suppress(OSError):
            self._writer.send(bytes([_QUIT]))
        self._writer.close()
        self._thread.join()
        self._reader.close()
        self._thread = None

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.restore()

    def _hand_off(self) -> None:
        """The thread: each byte is a signal number written by CPython's C handler."""
        assert self._reader is not None
        while True:
            try:
                data = self._reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == _QUIT:
                    return
                if signum in self.signals:  # other handled signals write here too (SIGALRM)
                    self._on_stop_signal(signal.Signals(signum))

    def _on_stop_signal(self, signum: signal.Signals) -> None:
        self.received += 1
        if stop_for_signal(self.received) is StopKind.WARM:
            if not self.lifecycle.request_stop(f"received {signum.name}"):
                log.info(
                    "%s: received %s while already stopping; another one is a cold stop",
                    self.lifecycle.name,
                    signum.name,
                )
        else:
            self.lifecycle.request_cold_stop(f"received {signum.name}, a second stop signal")


def _do_nothing(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: the C-level one already wrote ``signum`` to the wakeup fd,
    which the hand-off thread reads. Replacing the default handler is what keeps SIGTERM from
    killing the process and SIGINT from raising KeyboardInterrupt in whatever code runs."""
