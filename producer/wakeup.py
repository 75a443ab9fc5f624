"""Wake the producer when a consumer frees a slot (NOTIFY on CHANNEL_FINISHED) or new jobs
arrive (CHANNEL_SUBMITTED, sent by a trigger on every INSERT into jobs); the webhook sender
uses the same listener on its own channel.

A thread LISTENs on its own connection and calls ``on_wake``. A NOTIFY after a quiet spell (no
wake for QUIET_DEBOUNCES debounces) wakes it at once: a lone job, or a trickle of them, waits for
no timer. One that comes while wakes follow each other waits ``debounce_s`` first, so that a
burst of finished jobs costs one cycle, not one per job. (Waking at once whenever the last wake
was ``debounce_s`` ago or more ran more cycles at full load: a tenth more CPU per job for the
producer and PostgreSQL, no more throughput.) NOTIFYs can be lost across a reconnect; the
producer's interval cycle covers that, this only makes refills fast.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from scrapefleet.common.constants import CHANNEL_FINISHED, CHANNEL_SUBMITTED
from scrapefleet.common.db.channels import keyed_channels
from scrapefleet.common.db.engines import Listener
from scrapefleet.common.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

ASSIGNMENT_CHANNELS = (CHANNEL_FINISHED, CHANNEL_SUBMITTED)  # a slot freed, new work
WAIT_SLICE_S = 0.25  # longest a wait blocks before the thread looks at the stop flag
QUIET_DEBOUNCES = 4  # no wake for this many debounces: the next NOTIFY wakes at once


def pause_before_wake(last_wake_s: float, now_s: float, debounce_s: float) -> float:
    """How long a NOTIFY received at ``now_s`` waits before its wake: none after a quiet spell
    since the last wake (``last_wake_s``), else ``debounce_s``."""
    if now_s - last_wake_s >= QUIET_DEBOUNCES * debounce_s:
        return 0.0
    return debounce_s


class WakeListener:
    def __init__(
        self,
        database_url: str,
        on_wake: Callable[[], None],
        *,
        debounce_s: float,
        retry_s: float,
        stopping: threading.Event,
        channels: Sequence[str] = ASSIGNMENT_CHANNELS,
        name: str = "producer-wake",
    ) -> None:
        # The names the database gives them, with the fleet's key: no consumer's role can
        # NOTIFY them (migration 0031).
        self._listener = Listener(database_url, list(channels), resolve=keyed_channels)
        self._on_wake = on_wake
        self._debounce_s = debounce_s
        self._retry_s = retry_s
        self._stopping = stopping
        self._last_wake = -float("inf")  # time.monotonic() of the last on_wake
        self.listening = threading.Event()  # set once LISTEN is in place (tests wait on it)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        down = False
        try:
            while not self._stopping.is_set():
                try:
                    if not self.listening.is_set():
                        self._listener.wait(0)  # connects and LISTENs
                        self.listening.set()
                    payloads = self._listener.wait(WAIT_SLICE_S)
                except DatabaseUnavailable as exc:
                    self.listening.clear()
                    if not down:
                        log.warning("%s listener down, polling only: %s", self._thread.name, exc)
                    down = True
                    self._stopping.wait(self._retry_s)
                    continue
                if down:
                    log.info("%s listener reconnected", self._thread.name)
                    down = False
                if not payloads:
                    continue
                # What lands during the pause is dropped below: the wake covers it.
                pause_s = pause_before_wake(self._last_wake, time.monotonic(), self._debounce_s)
                if pause_s > 0 and self._stopping.wait(pause_s):
                    break
                # A lost connection reconnects at the next wait; wake now all the same.
                with contextlib.suppress(DatabaseUnavailable):
                    self._listener.wait(0)
                self._last_wake = time.monotonic()
                self._on_wake()
        finally:
            self._listener.close()
