"""The producer's probe: local hosts (no address) read their status file, the others go over SSH.

Implements the producer.probes.local_probe.Probe protocol. The SSH probe is imported on first use,
so a fleet of local hosts never loads paramiko, and an installation where it cannot be imported
still runs its local hosts (remote ones then count as failed probes, with the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.reads.queries import HostRow
from scrapefleet.common.settings import Settings
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probes.local_probe import HostTarget, LocalProbe, Probe

log = logging.getLogger(__name__)


def probe_target(host: HostRow, settings: Settings) -> HostTarget:
    """How to reach one host: its row's SSH settings, the fleet-wide settings where the row has
    none (key file, known_hosts). The row's user is always set: `hosts add` stores the ssh_user
    setting when no --user is given."""
    return HostTarget(
        name=host.name,
        address=host.address,
        port=host.ssh_port,
        user=host.ssh_user or settings.ssh_user,
        key_file=host.ssh_key_file or _str_or_none(settings.ssh_key_file),
        known_hosts_file=host.known_hosts_file or _str_or_none(settings.ssh_known_hosts_file),
    )


def _str_or_none(value: object | None) -> str | None:
    return None if value is None else str(value)


class RoutingProbe:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._local = LocalProbe(settings.state_dir, settings.local_state_stale_s)
        self._remote: Probe | None = None
        self._remote_unavailable: str | None = None  # why the SSH probe could not load

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        local = [t for t in targets if t.address is None]
        remote = [t for t in targets if t.address is not None]
        results = self._local.probe_all(local) if local else {}
        if not remote and self._remote is not None:
            self._remote.probe_all([])  # no remote host left: their connections are closed
        elif remote:
            probe = self._remote_probe()
            if probe is None:
                reason = ProbeError(f"SSH probe unavailable: {self._remote_unavailable}")
                results.update({t.name: reason for t in remote})
            else:
                results.update(probe.probe_all(remote))
        return results

    def close(self) -> None:
        self._local.close()
        if self._remote is not None:
            self._remote.close()

    def _remote_probe(self) -> Probe | None:
        if self._remote is None and self._remote_unavailable is None:
            try:
                from scrapefleet.producer.probes.ssh_probe import SSHProbe
            except ImportError as exc:
                self._remote_unavailable = f"cannot import producer.probes.ssh_probe ({exc})"
                log.error(
                    "SSH probe unavailable, hosts with an address get no work: %s",
                    self._remote_unavailable,
                )
                return None
            # Status command, timeout, workers and reconnect backoff all come from settings.
            self._remote = SSHProbe.from_settings(self._settings)
        return self._remote
