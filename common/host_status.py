"""The status document a consumer publishes and every probe reads.

The consumer writes it atomically to ``<state_dir>/hosts/<name>/status.json`` whenever its
running count changes (and at every heartbeat); ``scrapefleet-consumer status --json`` prints
the same document, so the local probe and the SSH probe parse one format.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scrapefleet.common.constants import STATUS_FORMAT_VERSION
from scrapefleet.common.errors import ProbeError

HOST_STATES = ("active", "draining", "restarting", "rebooting", "offline", "disabled")


@dataclass(frozen=True)
class HostStatus:
    host: str
    running: int
    capacity: int
    state: str
    boot_id: str
    jobs_since_restart: int
    jobs_since_boot: int
    memory_available_bytes: int
    memory_total_bytes: int
    load_1m: float
    pid: int
    updated_at: float  # unix time of the write
    version: int = STATUS_FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_INT_FIELDS = (
    "running",
    "capacity",
    "jobs_since_restart",
    "jobs_since_boot",
    "memory_available_bytes",
    "memory_total_bytes",
    "pid",
    "version",
)


def parse_status(text: str) -> HostStatus:
    """Parse and validate a status document; any defect is a ProbeError naming it."""
    if not text.strip():
        raise ProbeError("empty status output")
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"status is not JSON: {exc.msg} at char {exc.pos}") from None
    if not isinstance(raw, dict):
        raise ProbeError("status is not a JSON object")
    if raw.get("version") != STATUS_FORMAT_VERSION:
        raise ProbeError(
            f"status format version {raw.get('version')!r}, expected {STATUS_FORMAT_VERSION}"
        )
    missing = [f for f in HostStatus.__dataclass_fields__ if f not in raw]
    if missing:
        raise ProbeError(f"status lacks field(s): {', '.join(missing)}")
    for name in _INT_FIELDS:
        if not isinstance(raw[name], int) or isinstance(raw[name], bool) or raw[name] < 0:
            raise ProbeError(f"status field {name!r} is not a non-negative integer")
    for name in ("load_1m", "updated_at"):
        if not isinstance(raw[name], (int, float)) or isinstance(raw[name], bool):
            raise ProbeError(f"status field {name!r} is not a number")
    if raw["state"] not in HOST_STATES:
        raise ProbeError(f"status field 'state' is {raw['state']!r}, not a host state")
    if not isinstance(raw["host"], str) or not isinstance(raw["boot_id"], str):
        raise ProbeError("status fields 'host' and 'boot_id' must be strings")
    known = {k: raw[k] for k in HostStatus.__dataclass_fields__}
    known["load_1m"] = float(known["load_1m"])
    known["updated_at"] = float(known["updated_at"])
    return HostStatus(**known)


def status_path(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host / "status.json"


def write_status(state_dir: Path, status: HostStatus) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a document."""
    path = status_path(state_dir, status.host)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".status.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(status.to_json())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_status(state_dir: Path, host: str) -> HostStatus:
    try:
        text = status_path(state_dir, host).read_text()
    except OSError as exc:
        raise ProbeError(f"no status file for host {host!r}: {exc.strerror}") from None
    return parse_status(text)
