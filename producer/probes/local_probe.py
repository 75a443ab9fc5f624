"""How the producer asks a host what it is doing.

A probe returns, per host, the consumer's status document or the reason it could not get it.
``LocalProbe`` reads the status files of consumers on this machine; ``producer.probes.ssh_probe``
asks remote hosts over SSH. Both parse the document with common.status.document.parse_status, and
both fail a host alone: nothing one host's file or answer holds reaches another host's result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.answer import stale_reason
from scrapefleet.common.status.document import (
    HostStatus,
    parse_status,
    read_status_text,
    status_path,
)

log = logging.getLogger(__name__)


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
        now = time.time()
        return {target.name: self._probe_one(target.name, now) for target in targets}

    def _probe_one(self, name: str, now: float) -> HostStatus | ProbeError:
        try:
            return self._read(name, now)
        except ProbeError as exc:
            return exc
        except Exception as exc:  # a bug or an unforeseen defect: never the other hosts' round
            log.exception("unexpected error probing %s", name)
            return ProbeError(f"probe error: {type(exc).__name__}: {exc}")

    def _read(self, name: str, now: float) -> HostStatus:
        try:
            text = read_status_text(self.state_dir, name)
        except FileNotFoundError:
            # The usual mistake on one machine: the consumer writes under a state_dir of its
            # own, which the producer never reads.
            raise ProbeError(
                f"no status file at {status_path(self.state_dir, name)}: is its consumer"
                f" running, with this producer's state_dir ({self.state_dir})?"
            ) from None
        status = parse_status(text)
        if stale := stale_reason(status, now, self.stale_after_s):
            raise ProbeError(stale)
        if status.host != name:
            raise ProbeError(f"status file names host {status.host!r}")
        return status

    def close(self) -> None:
        pass
