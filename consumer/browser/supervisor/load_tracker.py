"""The host's browser limit as it moves: consumer.browser.supervisor.load_rules's pure rules, with
the samples and the lock around them.

Apart from the stack supervisor (consumer.browser.supervisor.stack_supervisor, which owns one)
because the limit is not the stacks' business and is read and moved from several threads: the main
loop's claims, the status document and the metrics endpoint read it, the supervisor's thread samples
the host at each step of the main loop, and a Grid call that timed out (a job thread's return,
a health check) lowers it. Every read and move is one short step under its own lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from scrapefleet.consumer.browser.supervisor import load_rules as browser_load
from scrapefleet.consumer.browser.supervisor.load_rules import BrowserLoad, HostSampler, LoadSample

log = logging.getLogger(__name__)

Sampler = Callable[[float], LoadSample]  # unix time -> the host's load now


class LoadLimit:
    def __init__(
        self, host: str, capacity: int, cores: int | None, sample: Sampler | None = None
    ) -> None:
        self.host = host
        self.capacity = capacity
        self._lock = threading.Lock()
        self._load = BrowserLoad.starting(capacity, cores)
        self._sample: Sampler = sample or HostSampler().sample
        self._sampled_at: float | None = None  # the supervisor's thread's only

    def limit(self) -> tuple[int, str | None]:
        """Browser jobs the host takes at once now, and why fewer than its capacity."""
        with self._lock:
            return self._load.limit, self._load.reason

    def starved(self, now: float) -> str | None:
        """Why the host is starved of CPU or memory at ``now``, else None."""
        with self._lock:
            return browser_load.starved(self._load, now)

    def follow(self, now: float, browser_busy: int) -> None:
        """Sample the host's load when one is due and move the limit by its rules; a move is
        logged, and the status document (which carries the limit) is rewritten by the daemon
        when it sees the change."""
        if self._sampled_at is not None and now - self._sampled_at < browser_load.SAMPLE_EVERY_S:
            return
        self._sampled_at = now
        try:
            sample = self._sample(now)
        except Exception as exc:  # a host that cannot be read keeps its limit
            log.debug("host %s: no load sample: %s", self.host, exc)
            return
        with self._lock:
            before = self._load.limit
            self._load = browser_load.adjust(
                browser_load.observe(self._load, sample, browser_busy), now
            )
            after, reason = self._load.limit, self._load.reason
        # INFO, not WARNING: on a CPU-bound workload the limit moves every few tens of seconds
        # by design, and the status document, host_load and the dashboard carry it.
        if after < before:
            log.info("host %s: %s", self.host, reason)
        elif after > before:
            log.info("host %s: taking %d of %d browser jobs again", self.host, after, self.capacity)

    def note_slow(self, now: float, what: str) -> None:
        """A Grid call timed out at ``now``: slowness, which fewer browser jobs cure."""
        with self._lock:
            self._load = browser_load.note_slow(self._load, now, what)
