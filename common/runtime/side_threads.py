"""The consumer's side threads: each one named, started here, and watched.

Every background thread of the daemon (heartbeat, listener, recorder, artifact janitor, the
browser stack's own thread and its short-lived helpers, the session pools' keep-alive and
workers) is started through one SideThreads, or runs work wrapped by its ``watch``.
A thread that raises, or a lasting one that returns while the daemon is not stopping, is a
death: one line names the thread and its error, and ``on_death`` stops the daemon, which then
exits non-zero. A daemon missing its heartbeat or its recorder would otherwise keep claiming
work it can no longer keep or record. Threads run with ``daemon=True`` so that a stuck one
never holds up the exit; a daemon thread that raises is otherwise gone without a word, which is
why every one is started through this wrapper.

The watch is the thread's own wrapper, not a poller: the death is seen the moment it happens.
procrastinate's worker does the same for its side tasks (``_monitor_side_tasks``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from scrapefleet.common.error_lines import first_line

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ThreadDied:
    """Which side thread ended out of turn, and why (one line)."""

    name: str
    error: str


class SideThreads:
    """Starts named side threads and reports the first one that dies."""

    def __init__(
        self,
        on_death: Callable[[ThreadDied], None] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self._on_death = on_death
        # A lasting thread that returns while this says False ended out of turn.
        self._stopping = stopping
        self._lock = threading.Lock()
        self._lasting: list[threading.Thread] = []
        self._died: ThreadDied | None = None

    @property
    def died(self) -> ThreadDied | None:
        """The first side thread that died, if one did."""
        with self._lock:
            return self._died

    def start(
        self, name: str, target: Callable[[], object], *, lasting: bool = True
    ) -> threading.Thread:
        """Run ``target`` in a thread called ``name``. ``lasting``: it runs until the daemon
        stops (returning earlier is a death, and ``join`` waits for it); else a helper that
        does one thing and returns."""
        thread = threading.Thread(
            target=self._watched, args=(name, target, lasting), name=name, daemon=True
        )
        if lasting:
            with self._lock:
                self._lasting.append(thread)
        thread.start()
        return thread

    def watch(self, name: str, work: Callable[P, T]) -> Callable[P, T]:
        """``work`` as a pool's thread runs it: an exception it raises is a death (a pool
        would keep it in a future nobody reads), then raised on as before."""

        def watched(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return work(*args, **kwargs)
            except BaseException as exc:
                self._death(ThreadDied(name, first_line(exc, named=True)))
                raise

        return watched

    def executor(self, name: str, workers: int) -> ThreadPoolExecutor:
        """A pool of ``workers`` threads called ``name``_<n>, each task watched."""
        return _WatchedPool(self, name, workers)

    def join(self, timeout_s: float) -> None:
        """Wait for the lasting threads to return, ``timeout_s`` for all of them together."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._lasting)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _watched(self, name: str, target: Callable[[], object], lasting: bool) -> None:
        try:
            target()
        except BaseException as exc:
            self._death(ThreadDied(name, first_line(exc, named=True)))
            log.debug("thread %s died", name, exc_info=True)
            return
        if lasting and self._stopping is not None and not self._stopping():
            self._death(ThreadDied(name, "returned while the consumer was running"))

    def _death(self, died: ThreadDied) -> None:
        with self._lock:
            first = self._died is None
            if first:
                self._died = died
        log.error("thread %s died: %s; stopping the consumer", died.name, died.error)
        if first and self._on_death is not None:
            self._on_death(died)


class _WatchedPool(ThreadPoolExecutor):
    def __init__(self, threads: SideThreads, name: str, workers: int) -> None:
        super().__init__(max_workers=workers, thread_name_prefix=name)
        self._watch = threads
        self._name = name

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(self._watch.watch(self._name, fn), *args, **kwargs)
