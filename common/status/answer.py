"""What a consumer host answers the producer's SSH probe, and how fresh that answer is.

The answer is the host's clock, then its status document as the consumer wrote it:

    1795723051                      <- `date +%s` on the host (unix seconds)
    {"boot_id": ..., "updated_at": 1795723050.7, ...}   <- `cat` of its status.json

The forced command of the producer's key (``status_answer_command``) starts only ``sh``,
``date`` and ``cat``: each probe costs the host a few milliseconds of CPU, where the
``scrapefleet-consumer status`` command, a Python start-up, cost a fifth of a second or more
(tests/benchmarks/bench_ssh_probe.py). The host's clock travels with the document so that the
producer judges the document's age on the clock that wrote it: a host whose clock is off never
looks dead for it, nor a dead one alive.

An answer without the clock line is what an older forced command prints (``scrapefleet-consumer
status --json``, which refused a stale document on the host itself): the whole answer is then the
document, and its age was already judged. Nothing in an answer is trusted: the producer reads at
most ``MAX_ANSWER_BYTES`` and parses the document with common.status.document.parse_status.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import MAX_STATUS_BYTES, HostStatus, parse_status

CLOCK_DIGITS = 12  # unix seconds up to the year 33658: more is garbage
MAX_ANSWER_BYTES = MAX_STATUS_BYTES + CLOCK_DIGITS + 1  # the clock line, then the document
_CLOCK_LINE = re.compile(rb"([0-9]{1,%d})\r?\n" % CLOCK_DIGITS)


def status_answer_command(status_file: Path | str) -> str:
    """The forced command (authorized_keys ``command=``) that answers the probe with the host's
    clock and the status document at ``status_file``. The Ansible role writes the same line
    (roles/consumer/vars/main.yml); tests/ansible checks the two agree."""
    return f"date +%s && exec cat {shlex.quote(str(status_file))}"


@dataclass(frozen=True)
class StatusAnswer:
    status: HostStatus
    host_clock: float | None  # the host's unix time when it answered; None: an older command


def parse_status_answer(output: bytes) -> StatusAnswer:
    """Split and validate an answer; any defect is a ProbeError naming it."""
    if len(output) > MAX_ANSWER_BYTES:
        raise ProbeError(f"status output larger than {MAX_ANSWER_BYTES} bytes")
    clock = _CLOCK_LINE.match(output)
    document = output[clock.end() :] if clock else output
    try:
        text = document.decode()
    except UnicodeDecodeError as exc:
        raise ProbeError(f"status is not UTF-8 (byte {exc.start})") from None
    host_clock = float(clock.group(1)) if clock else None
    return StatusAnswer(parse_status(text), host_clock)


def stale_reason(status: HostStatus, now: float, stale_after_s: float) -> str | None:
    """Why ``status`` is too old to act on at ``now`` (the clock of the host that wrote it), or
    None. The consumer rewrites it every heartbeat: an old one is a consumer that died or hung,
    and its last words (say "active, 0 running") must not draw new jobs."""
    age = now - status.updated_at
    if age > stale_after_s:
        return f"status is {age:.0f} s old: consumer not running?"
    return None
