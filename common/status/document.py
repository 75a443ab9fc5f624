"""The status document a consumer publishes and every probe reads.

The consumer writes it atomically to ``<state_dir>/hosts/<name>/status.json`` at every heartbeat
and whenever its state, its browser stack or its count of stuck threads changes. The local probe
reads the file; the SSH probe's forced command prints it after the host's clock
(common.status.answer), and ``scrapefleet-consumer status --json`` prints it for people: one
format for every reader. Not at every claim and completion: the producer counts a host's jobs in
the database, which is always current, and takes from the document only what the database
cannot know (``stuck``: threads still busy with jobs the database no longer counts there).

The producer trusts none of it: every field is checked for its type and range, the document for
its size, and a defect is a failed probe of that host alone. The consumer's user writes its
host's directory, so the file itself is hostile too: ``read_status_text`` opens a regular file
only (never a FIFO, a device or a link) and reads at most ``MAX_STATUS_BYTES``.

``daemon`` (the consumer's lifecycle: starting, running, draining, stopped) came later than the
rest: a document without it, from an older consumer, still parses (as None); so do
``browser*`` and ``stuck``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from scrapefleet.common.constants import STATUS_FORMAT_VERSION
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.runtime.lifecycle import DaemonState
from scrapefleet.common.store.statuses import HostState

# store.statuses loads no SQLAlchemy: ``scrapefleet-consumer status`` starts light.
HOST_STATES = tuple(s.value for s in HostState)
DAEMON_STATES = tuple(s.value for s in DaemonState)
MAX_STATUS_CHARS = 64 * 1024  # a document is ~450 characters; more is garbage
MAX_STATUS_BYTES = MAX_STATUS_CHARS  # read cap; the consumer writes ASCII (json.dumps' default)
MAX_REASON_CHARS = 500  # one line for an operator; the consumer clips its own


class BrowserState(StrEnum):
    """What a host's browser stack can do now: the second axis of a host's state."""

    IDLE = "idle"  # configured, not started: it starts on the first browser job
    STARTING = "starting"
    READY = "ready"
    FAILING = "failing"  # failed to start; retries by itself at browser_retry_at
    ABSENT = "absent"  # not configured on this host (browser = false)


BROWSER_STATES = tuple(s.value for s in BrowserState)
TAKES_BROWSER_JOBS = frozenset({BrowserState.IDLE, BrowserState.STARTING, BrowserState.READY})


def takes_browser_jobs(browser: str | None) -> bool:
    """Whether a host whose stack is in ``browser`` may be given a browser job. None: a consumer
    that predates the field, whose stack always started on demand."""
    return browser is None or browser in TAKES_BROWSER_JOBS


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
    browser: str | None = None  # BrowserState; None from a consumer that predates it
    browser_reason: str | None = None  # why the stack is failing (one line)
    browser_retry_at: float | None = None  # unix time of the failing stack's next try
    # Pool threads busy with jobs that are no longer this host's in the database (past their
    # timeout, stopped, rescued): counted in ``running`` too. None from an older consumer.
    stuck: int | None = None
    # Browser jobs the host takes at once now: its capacity, or fewer while it is short of CPU
    # or memory or its Grid answers late (consumer.browser.load), and why in one line. None
    # from an older consumer (the producer then counts on the capacity).
    browser_limit: int | None = None
    browser_limit_reason: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


# Upper bounds as well as lower: a value the database cannot store (a bigint overflow) would
# abort the producer's health write for every host, not just this one.
INT32_MAX = 2**31 - 1
_INT_FIELDS = {
    "running": 100_000,
    "capacity": 100_000,
    "jobs_since_restart": INT32_MAX,
    "jobs_since_boot": INT32_MAX,
    "memory_available_bytes": 2**60,
    "memory_total_bytes": 2**60,
    "pid": INT32_MAX,
    "version": 1_000,
}
_OPTIONAL_FIELDS = (
    "daemon",
    "browser",
    "browser_reason",
    "browser_retry_at",
    "stuck",
    "browser_limit",
    "browser_limit_reason",
)
MAX_STUCK = _INT_FIELDS["running"]
# The kernel's boot id is a UUID; a test or a host without one sends a short token instead.
BOOT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
MAX_HOST_CHARS = 255
MAX_LOAD = 1e6
MAX_UNIX_TIME = 2.0**33  # the year 2242: anything later is garbage (and past timestamptz)


def parse_status(text: str) -> HostStatus:
    """Parse and validate a status document; any defect is a ProbeError naming it."""
    raw = _load_object(text)
    _check_core_fields(raw)
    _check_browser_fields(raw)
    stuck = raw.get("stuck")
    if stuck is not None and (
        not isinstance(stuck, int) or isinstance(stuck, bool) or not 0 <= stuck <= MAX_STUCK
    ):
        raise ProbeError(f"status field 'stuck' is not an integer from 0 to {MAX_STUCK}")
    known: dict[str, Any] = {k: raw.get(k) for k in HostStatus.__dataclass_fields__}
    known["load_1m"] = float(known["load_1m"])
    known["updated_at"] = float(known["updated_at"])
    if known["browser_retry_at"] is not None:
        known["browser_retry_at"] = float(known["browser_retry_at"])
    return HostStatus(**known)


def _load_object(text: str) -> dict[str, Any]:
    if len(text) > MAX_STATUS_CHARS:
        raise ProbeError(f"status larger than {MAX_STATUS_CHARS} characters")
    if not text.strip():
        raise ProbeError("empty status output")
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"status is not JSON: {exc.msg} at char {exc.pos}") from None
    except RecursionError:
        raise ProbeError("status is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past int()'s digit limit
        raise ProbeError(f"status is not JSON: {_clip(str(exc), 80)}") from None
    if not isinstance(raw, dict):
        raise ProbeError("status is not a JSON object")
    return raw


def _check_core_fields(raw: dict[str, Any]) -> None:
    if raw.get("version") != STATUS_FORMAT_VERSION:
        raise ProbeError(
            f"status format version {raw.get('version')!r}, expected {STATUS_FORMAT_VERSION}"
        )
    missing = [
        f for f in HostStatus.__dataclass_fields__ if f not in raw and f not in _OPTIONAL_FIELDS
    ]
    if missing:
        raise ProbeError(f"status lacks field(s): {', '.join(missing)}")
    for name, most in _INT_FIELDS.items():
        value = raw[name]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
            raise ProbeError(f"status field {name!r} is not an integer from 0 to {most}")
    for name, top in (("load_1m", MAX_LOAD), ("updated_at", MAX_UNIX_TIME)):
        if not _is_finite_number(raw[name]) or not 0 <= raw[name] <= top:
            raise ProbeError(f"status field {name!r} is not a number from 0 to {top:g}")
    if raw["state"] not in HOST_STATES:
        raise ProbeError(f"status field 'state' is {_clip(raw['state'])}, not a host state")
    if not isinstance(raw["host"], str) or not 0 < len(raw["host"]) <= MAX_HOST_CHARS:
        raise ProbeError(f"status field 'host' is not a string of 1 to {MAX_HOST_CHARS} chars")
    if not isinstance(raw["boot_id"], str) or not BOOT_ID.fullmatch(raw["boot_id"]):
        raise ProbeError(f"status field 'boot_id' is {_clip(raw['boot_id'])}, not a boot id")
    daemon = raw.get("daemon")
    if daemon is not None and (not isinstance(daemon, str) or daemon not in DAEMON_STATES):
        raise ProbeError(f"status field 'daemon' is {_clip(daemon)}, not a daemon state")


def _check_browser_fields(raw: dict[str, Any]) -> None:
    browser, reason, retry_at = (
        raw.get("browser"),
        raw.get("browser_reason"),
        raw.get("browser_retry_at"),
    )
    if browser is not None and (not isinstance(browser, str) or browser not in BROWSER_STATES):
        raise ProbeError(f"status field 'browser' is {_clip(browser)}, not a browser state")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
        raise ProbeError(
            f"status field 'browser_reason' is not a string of at most {MAX_REASON_CHARS} chars"
        )
    if retry_at is not None and not (
        _is_finite_number(retry_at) and 0 <= retry_at <= MAX_UNIX_TIME
    ):
        raise ProbeError("status field 'browser_retry_at' is not a unix time")
    limit, why = raw.get("browser_limit"), raw.get("browser_limit_reason")
    most = _INT_FIELDS["capacity"]
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= most
    ):
        raise ProbeError(f"status field 'browser_limit' is not an integer from 0 to {most}")
    if why is not None and (not isinstance(why, str) or len(why) > MAX_REASON_CHARS):
        raise ProbeError(
            f"status field 'browser_limit_reason' is not a string of at most"
            f" {MAX_REASON_CHARS} chars"
        )


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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


# O_NONBLOCK: opening a FIFO with no writer returns at once (then refused) instead of waiting.
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def read_status_text(state_dir: Path, host: str) -> str:
    """The text of a host's status file, read as a hostile file: the host's directory and the
    file are opened without following a link (the consumer's user owns both; state_dir and
    hosts/ are the operator's), only a regular file is read, and at most MAX_STATUS_BYTES of it.

    Raises FileNotFoundError when there is no file (the caller explains that case), and
    ProbeError naming the defect otherwise.
    """
    path = status_path(state_dir, host)
    try:
        directory = os.open(path.parent, _OPEN_DIR)
        try:
            fd = os.open(path.name, _OPEN_FILE, dir_fd=directory)
        finally:
            os.close(directory)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ProbeError(f"{exc.filename or path} is a symbolic link: refused") from None
        raise ProbeError(f"cannot open {path}: {exc.strerror}") from None
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            what = _FILE_KINDS.get(kind, "not a file")
            raise ProbeError(f"{path} is not a regular file ({what}): refused")
        data = _read_at_most(fd, MAX_STATUS_BYTES + 1)
    except OSError as exc:
        raise ProbeError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_STATUS_BYTES:
        raise ProbeError(f"status file larger than {MAX_STATUS_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ProbeError(f"status is not UTF-8 (byte {exc.start})") from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_status(state_dir: Path, host: str) -> HostStatus:
    try:
        text = read_status_text(state_dir, host)
    except FileNotFoundError:
        raise ProbeError(f"no status file for host {host!r}") from None
    return parse_status(text)
