"""The status document a consumer publishes and every probe reads.

The consumer writes it atomically to ``<state_dir>/hosts/<name>/status.json`` whenever its
running count changes (and at every heartbeat); ``scrapefleet-consumer status --json`` prints
the same document, so the local probe and the SSH probe parse one format.

The producer trusts none of it: every field is checked for its type and range, the document for
its size, and a defect is a failed probe of that host alone. ``daemon`` (the consumer's
lifecycle: starting, running, draining, stopped) came later than the rest: a document without
it, from an older consumer, still parses (as None).

HOST_STATES is spelled here, in a module that loads no SQLAlchemy: ``scrapefleet-consumer
status`` runs once per probe over SSH, and importing common.tables would triple its start-up.
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
from scrapefleet.common.lifecycle import DaemonState

HOST_STATES = ("active", "draining", "restarting", "rebooting", "offline", "disabled")
DAEMON_STATES = tuple(s.value for s in DaemonState)
MAX_STATUS_CHARS = 64 * 1024  # a document is ~450 characters; more is garbage


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
    daemon: str | None = None  # the consumer's DaemonState; None from a consumer that predates it

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
_OPTIONAL_FIELDS = ("daemon",)


def parse_status(text: str) -> HostStatus:
    """Parse and validate a status document; any defect is a ProbeError naming it."""
    if len(text) > MAX_STATUS_CHARS:
        raise ProbeError(f"status larger than {MAX_STATUS_CHARS} characters")
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
    missing = [
        f for f in HostStatus.__dataclass_fields__ if f not in raw and f not in _OPTIONAL_FIELDS
    ]
    if missing:
        raise ProbeError(f"status lacks field(s): {', '.join(missing)}")
    for name in _INT_FIELDS:
        if not isinstance(raw[name], int) or isinstance(raw[name], bool) or raw[name] < 0:
            raise ProbeError(f"status field {name!r} is not a non-negative integer")
    for name in ("load_1m", "updated_at"):
        if not isinstance(raw[name], (int, float)) or isinstance(raw[name], bool):
            raise ProbeError(f"status field {name!r} is not a number")
    if raw["state"] not in HOST_STATES:
        raise ProbeError(f"status field 'state' is {_clip(raw['state'])}, not a host state")
    if not isinstance(raw["host"], str) or not isinstance(raw["boot_id"], str):
        raise ProbeError("status fields 'host' and 'boot_id' must be strings")
    daemon = raw.get("daemon")
    if daemon is not None and (not isinstance(daemon, str) or daemon not in DAEMON_STATES):
        raise ProbeError(f"status field 'daemon' is {_clip(daemon)}, not a daemon state")
    known: dict[str, Any] = {k: raw.get(k) for k in HostStatus.__dataclass_fields__}
    known["load_1m"] = float(known["load_1m"])
    known["updated_at"] = float(known["updated_at"])
    return HostStatus(**known)


def _clip(value: Any, limit: int = 40) -> str:
    """A reported value quoted in an error an operator reads: never the whole of a big one."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
