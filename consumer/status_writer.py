"""The consumer's side of the status document: gather the figures and write them atomically.

The producer's probe reads this file (locally, or over SSH via ``scrapefleet-consumer status``)
to learn whether the host is alive, in which state, and how many of its threads are stuck (busy
with jobs the database no longer counts there); the daemon rewrites it at every heartbeat and
when one of those changes, never per job (a rename per claim and per completion was a fifth of a
noop consumer's time; the producer counts a host's jobs in the database). Memory and load are
sampled at heartbeats only: they move slowly, and reading /proc for every job would cost more
than the job itself (noop benchmarks).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from scrapefleet.common.status.document import HostStatus, write_status

log = logging.getLogger(__name__)

UNKNOWN_BOOT_ID = "unknown"


def read_boot_id(path: Path) -> str:
    """The kernel's boot id (a new one means the host rebooted); 'unknown' if unreadable."""
    try:
        return path.read_text().strip() or UNKNOWN_BOOT_ID
    except OSError as exc:
        log.warning("cannot read boot id from %s (%s); using %r", path, exc, UNKNOWN_BOOT_ID)
        return UNKNOWN_BOOT_ID


@dataclass(frozen=True)
class Snapshot:
    """What the daemon knows at one instant; taken under the reporter's lock (see publish)."""

    running: int
    capacity: int
    state: str
    jobs_since_restart: int
    jobs_since_boot: int
    daemon: str  # the daemon's lifecycle state (common.runtime.lifecycle.DaemonState)
    browser: str | None = None  # what its browser stack can do now (host_status.BrowserState)
    browser_reason: str | None = None
    browser_retry_at: float | None = None  # unix time of a failing stack's next try
    stuck: int = 0  # threads busy with jobs no longer this host's in the database
    browser_limit: int | None = None  # browser jobs taken at once now (None: no stack)
    browser_limit_reason: str | None = None  # why fewer than capacity


class StatusReporter:
    def __init__(
        self,
        state_dir: Path,
        host: str,
        boot_id: str,
        kinds: dict[str, str | None] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.host = host
        self.boot_id = boot_id
        self.kinds = kinds  # what this consumer's registry runs: fixed for its lifetime
        self._lock = threading.Lock()
        self._memory_available = 0
        self._memory_total = 0
        self._load_1m = 0.0
        self._warned = False
        self.sample_system()

    def sample_system(self) -> None:
        memory = psutil.virtual_memory()
        self._memory_available, self._memory_total = int(memory.available), int(memory.total)
        self._load_1m = os.getloadavg()[0]

    def publish(self, snapshot: Callable[[], Snapshot]) -> None:
        """Write the document. ``snapshot`` is called under this reporter's lock so that two
        threads publishing at once can never write an older count after a newer one."""
        with self._lock:
            now = snapshot()
            status = HostStatus(
                host=self.host,
                running=now.running,
                capacity=now.capacity,
                state=now.state,
                boot_id=self.boot_id,
                jobs_since_restart=now.jobs_since_restart,
                jobs_since_boot=now.jobs_since_boot,
                memory_available_bytes=self._memory_available,
                memory_total_bytes=self._memory_total,
                load_1m=self._load_1m,
                pid=os.getpid(),
                updated_at=time.time(),
                daemon=now.daemon,
                browser=now.browser,
                browser_reason=now.browser_reason,
                browser_retry_at=now.browser_retry_at,
                stuck=now.stuck,
                browser_limit=now.browser_limit,
                browser_limit_reason=now.browser_limit_reason,
                kinds=self.kinds,
            )
            try:
                write_status(self.state_dir, status)
                self._warned = False
            except OSError as exc:
                # A full disk must not stop the jobs; the probe will see a stale file and say so.
                if not self._warned:
                    log.warning("cannot write status file in %s: %s", self.state_dir, exc)
                    self._warned = True
