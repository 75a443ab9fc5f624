"""One thread that carries out, in order, the work any other thread posts to it.

The browser stack's supervisor (consumer.browser.supervisor.stack_supervisor) owns its stacks and
pools through one: the main loop, the job threads, the heartbeat and the supervisor's own helpers
only post events, so that no two starts, stops or pool switches ever run at once, and the fields
they replace have one writer.

A poster may wait for its work (``wait=True``: it sees the work's exception, as if it had run
the work itself) or not (a helper thread's answer, a browser to kill). Before ``start`` and
after the thread is gone, work runs in the poster's thread: the unit tests drive the supervisor
so, and a daemon whose stack thread died still stops its browsers on the way out.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from scrapefleet.common.runtime.side_threads import SideThreads

log = logging.getLogger(__name__)

ALIVE_CHECK_S = 0.5  # how often a waiting poster looks whether the thread is still there


class _Work:
    def __init__(self, run: Callable[[], None], wait: bool) -> None:
        self.run = run
        self.done = threading.Event() if wait else None
        self.taken = False  # by the thread: once it is gone, untaken work runs in the poster
        self.error: Exception | None = None


class SerialThread:
    def __init__(self, name: str, threads: SideThreads) -> None:
        self.name = name
        self._threads = threads
        self._inbox: queue.Queue[_Work | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = self._threads.start(self.name, self._serve)

    @property
    def current(self) -> bool:
        """Whether the caller runs on this thread."""
        return self._thread is threading.current_thread()

    def run(self, work: Callable[[], None], *, wait: bool = True) -> None:
        """Carry ``work`` out on the thread, after what was posted before it; ``wait``: return
        once it is done, raising what it raised."""
        thread = self._thread
        if thread is None or thread is threading.current_thread() or not thread.is_alive():
            work()
            return
        item = _Work(work, wait)
        self._inbox.put(item)
        if item.done is None:
            return
        while not item.done.wait(ALIVE_CHECK_S):
            if not thread.is_alive():
                if not item.taken:  # it died before getting to it
                    work()
                return
        if item.error is not None:
            raise item.error

    def stop(self, timeout_s: float) -> None:
        """Let the thread finish what was posted, then end."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        self._inbox.put(None)
        thread.join(timeout_s)

    def _serve(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            item.taken = True
            try:
                item.run()
            except Exception as exc:
                if item.done is None:
                    raise  # nobody to tell: this thread's death stops the daemon
                item.error = exc
            finally:
                if item.done is not None:
                    item.done.set()
