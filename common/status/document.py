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
import os
import re
import stat
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

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
    # or memory or its Grid answers late (consumer.browser.supervisor.load_rules), and why in one
    # line. None from an older consumer (the producer then counts on the capacity).
    browser_limit: int | None = None
    browser_limit_reason: str | None = None
    # The action kinds this consumer can run, each with the version of the package providing
    # it (None: not from an installed package). None from an older consumer: it runs any kind.
    kinds: dict[str, str | None] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


# Upper bounds as well as lower: a value the database cannot store (a bigint overflow) would
# abort the producer's health write for every host, not just this one.
INT32_MAX = 2**31 - 1
MAX_COUNT = 100_000  # running, capacity, stuck, browser_limit: no host runs more
MAX_BYTES = 2**60
MAX_HOST_CHARS = 255
MAX_LOAD = 1e6
MAX_UNIX_TIME = 2.0**33  # the year 2242: anything later is garbage (and past timestamptz)
MAX_KINDS = 1_000  # a fleet's actions are tens; more is garbage
MAX_KIND_CHARS = 100
MAX_VERSION_CHARS = 64
# The kernel's boot id is a UUID; a test or a host without one sends a short token instead.
BOOT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def _one_of(allowed: tuple[str, ...], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{_clip(value)} is not {what}")
        return value

    return check


def _boot_id(value: str) -> str:
    if not BOOT_ID.fullmatch(value):
        raise ValueError(f"{_clip(value)} is not a boot id")
    return value


def _kinds(kinds: dict[str, Any]) -> dict[str, str | None]:
    if len(kinds) > MAX_KINDS:
        raise ValueError(f"more than {MAX_KINDS} kinds")
    for kind, version in kinds.items():
        if not (0 < len(kind) <= MAX_KIND_CHARS and kind.isprintable() and kind.strip() == kind):
            raise ValueError(f"{_clip(kind)} is not a kind name")
        if version is not None and not (
            isinstance(version, str) and len(version) <= MAX_VERSION_CHARS and version.isprintable()
        ):
            raise ValueError(f"gives {_clip(kind)} the version {_clip(version)}")
    return kinds


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Total = Annotated[int, Field(ge=0, le=INT32_MAX)]
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
UnixTime = Annotated[float, Field(ge=0, le=MAX_UNIX_TIME, allow_inf_nan=False)]
Reason = Annotated[str, Field(max_length=MAX_REASON_CHARS)]


class StatusDocument(BaseModel):
    """The document as a host sends it, every field typed and bounded: JSON's types only
    (strict: no "2" for 2, no true for 1), unknown fields ignored (a newer consumer's)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    host: Annotated[str, Field(min_length=1, max_length=MAX_HOST_CHARS)]
    running: Count
    capacity: Count
    state: Annotated[str, AfterValidator(_one_of(HOST_STATES, "a host state"))]
    boot_id: Annotated[str, AfterValidator(_boot_id)]
    jobs_since_restart: Total
    jobs_since_boot: Total
    memory_available_bytes: Bytes
    memory_total_bytes: Bytes
    load_1m: Annotated[float, Field(ge=0, le=MAX_LOAD, allow_inf_nan=False)]
    pid: Total
    updated_at: UnixTime
    version: Annotated[int, Field(ge=0, le=1_000)]
    daemon: Annotated[str, AfterValidator(_one_of(DAEMON_STATES, "a daemon state"))] | None = None
    browser: Annotated[str, AfterValidator(_one_of(BROWSER_STATES, "a browser state"))] | None = (
        None
    )
    browser_reason: Reason | None = None
    browser_retry_at: UnixTime | None = None
    stuck: Count | None = None
    browser_limit: Count | None = None
    browser_limit_reason: Reason | None = None
    kinds: Annotated[dict[str, Any], AfterValidator(_kinds)] | None = None


def parse_status(text: str) -> HostStatus:
    """Parse and validate a status document; any defect is a ProbeError naming it."""
    raw = _load_object(text)
    # Another version's fields may mean other things: no field of it is read.
    if raw.get("version") != STATUS_FORMAT_VERSION:
        raise ProbeError(
            f"status format version {_clip(raw.get('version'))}, expected {STATUS_FORMAT_VERSION}"
        )
    try:
        document = StatusDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "?"
        message = first["msg"].removeprefix("Value error, ")
        raise ProbeError(f"status field {field!r}: {message}") from None
    return HostStatus(**document.model_dump())


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
