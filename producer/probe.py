"""How the producer asks a host what it is doing.

A probe returns, per host, the consumer's status document or the reason it could not get it.
``LocalProbe`` reads the status files of consumers on this machine; ``producer.ssh_probe``
asks remote hosts over SSH. Both parse the document with common.host_status.parse_status.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.host_status import HostStatus, read_status, status_path


@dataclass(frozen=True)
class HostTarget:
    name: str
    address: str | None  # None -> local probe
    port: int = 22
    user: str = "scrapefleet"
    key_file: str | None = None
    known_hosts_file: str | None = None


class Probe(Protocol):
    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]: ...

    def close(self) -> None: ...


class LocalProbe:
    """Reads ``<state_dir>/hosts/<name>/status.json``; a file older than ``stale_after_s`` means
    the consumer stopped writing it (dead or hung), which is a failed probe."""

    def __init__(self, state_dir: Path, stale_after_s: float) -> None:
        self.state_dir = state_dir
        self.stale_after_s = stale_after_s

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        results: dict[str, HostStatus | ProbeError] = {}
        now = time.time()
        for target in targets:
            try:
                path = status_path(self.state_dir, target.name)
                if not path.exists():
                    # The usual mistake on one machine: the consumer writes under a state_dir
                    # of its own, which the producer never reads.
                    raise ProbeError(
                        f"no status file at {path}: is its consumer running, with this"
                        f" producer's state_dir ({self.state_dir})?"
                    )
                status = read_status(self.state_dir, target.name)
                age = now - status.updated_at
                if age > self.stale_after_s:
                    raise ProbeError(f"status is {age:.0f} s old: consumer not running?")
                if status.host != target.name:
                    raise ProbeError(f"status file names host {status.host!r}")
                results[target.name] = status
            except ProbeError as exc:
                results[target.name] = exc
        return results

    def close(self) -> None:
        pass
