"""Probe consumer hosts over SSH (paramiko) for their status document.

One Transport per host stays open across rounds: connect + key exchange + auth costs several
round trips and CPU on both sides, while a command on an open Transport is one channel. Every
failure becomes a ProbeError whose one-line message is what an operator reads in SQL; nothing
from paramiko or the socket layer escapes ``probe_all``.

What a host answers (common.status.answer): its clock, then its status document, from a forced
command that starts only sh, date and cat; the document's age is judged here on that clock.

How one connection is opened, verified and used (key authentication only, the host key checked
against known_hosts, never added) is producer.probes.ssh_connect's; this module is the round: the
pool of workers, the kept-open links and their reconnect back-off, and what a host's answer means.
"""

from __future__ import annotations

import concurrent.futures
import logging
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import paramiko

from scrapefleet.common.error_lines import last_line
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.settings import Settings, setting_default
from scrapefleet.common.status.answer import parse_status_answer, stale_reason
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probes.local_probe import HostTarget
from scrapefleet.producer.probes.ssh_connect import (
    RoundDeadline,
    TransportBroken,
    connect,
    run_command,
)

log = logging.getLogger(__name__)

DEFAULT_STATUS_COMMAND = "scrapefleet-consumer status --json"
DEFAULT_MAX_WORKERS = 16
# After the 2nd consecutive connect failure; doubles each time, up to the max: a host that comes
# back is seen within that long.
RECONNECT_BASE_S: float = setting_default("ssh_reconnect_base_s")
RECONNECT_MAX_S: float = setting_default("ssh_reconnect_max_s")
MAX_DETAIL_CHARS = 200  # of the status command's last stderr line, quoted in the reason
ROUND_GRACE_S = 0.25  # how long past the deadline the round waits for workers to notice it


def reconnect_delay_s(
    consecutive_failures: int, base_s: float = RECONNECT_BASE_S, max_s: float = RECONNECT_MAX_S
) -> float:
    """Seconds to wait before the next connect attempt after this many failures in a row.

    The first failure retries at the next round (a dropped connection is usually a restarted
    sshd); after that the wait doubles up to max_s. No jitter: every host has its own sshd, so
    simultaneous retries do not pile onto one server.
    """
    if consecutive_failures <= 1:
        return 0.0
    # The exponent is capped so a week-long outage cannot overflow the float.
    return min(max_s, base_s * 2.0 ** min(consecutive_failures - 2, 64))


@dataclass
class _HostLink:
    """The kept-open connection to one host and its reconnect bookkeeping."""

    transport: paramiko.Transport | None = None
    connects: int = 0
    failures: int = 0  # consecutive failed connects
    retry_at: float = 0.0  # monotonic time before which no connect is attempted
    last_error: str = ""
    logged_reason: str = ""  # last reason logged, so a failing host logs once, not every round
    lock: threading.Lock = field(default_factory=threading.Lock)

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None


class SSHProbe:
    """Implements producer.probes.local_probe.Probe over SSH."""

    def __init__(
        self,
        timeout_s: float = setting_default("probe_timeout_s"),
        max_workers: int = DEFAULT_MAX_WORKERS,
        command: str = DEFAULT_STATUS_COMMAND,
        *,
        stale_after_s: float = setting_default("local_state_stale_s"),
        fresh: bool = False,
        reconnect_base_s: float = RECONNECT_BASE_S,
        reconnect_max_s: float = RECONNECT_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.command = command
        self.stale_after_s = stale_after_s  # on the host's clock, which comes with the answer
        self.fresh = fresh  # connect afresh every round (benchmark baseline)
        self._reconnect = (reconnect_base_s, reconnect_max_s)
        self._clock = clock
        self._links: dict[str, _HostLink] = {}
        self._links_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, "ssh-probe")

    @classmethod
    def from_settings(cls, settings: Settings) -> SSHProbe:
        return cls(
            timeout_s=settings.probe_timeout_s,
            max_workers=settings.ssh_probe_workers,
            command=settings.ssh_status_command,
            stale_after_s=settings.local_state_stale_s,
            reconnect_base_s=settings.ssh_reconnect_base_s,
            reconnect_max_s=settings.ssh_reconnect_max_s,
        )

    # -- the Probe protocol ---------------------------------------------------------------

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        """Probe every target in parallel; the round ends by timeout_s (+ a small grace). A host
        no longer among the targets (removed, disabled) loses its kept-open connection."""
        self._forget_all_but({t.name for t in targets})
        deadline = RoundDeadline(self.timeout_s, self._clock() + self.timeout_s, self._clock)
        futures = {t.name: self._pool.submit(self._probe_guarded, t, deadline) for t in targets}
        concurrent.futures.wait(futures.values(), timeout=self.timeout_s + ROUND_GRACE_S)
        results: dict[str, HostStatus | ProbeError] = {}
        for name, future in futures.items():
            if future.done():
                results[name] = future.result()
                continue
            if future.cancel():  # never started: every worker was busy with slower hosts
                results[name] = self._busy_error()
                continue
            # A worker stuck past its deadline. Closing the transport wakes a worker blocked
            # in paramiko; the host reconnects next round.
            self._link(name).drop()
            results[name] = ProbeError(f"timed out after {self.timeout_s} s")
        for name, result in results.items():
            self._log_transition(name, result)
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._links_lock:
            for link in self._links.values():
                link.drop()
            self._links.clear()

    def _forget_all_but(self, names: set[str]) -> None:
        """Close and forget the links of hosts not in ``names``: an SSH session to a host the
        fleet no longer probes would stay open on it until the producer stopped."""
        with self._links_lock:
            gone = [name for name in self._links if name not in names]
            links = [self._links.pop(name) for name in gone]
        for link in links:
            link.drop()

    def _busy_error(self) -> ProbeError:
        return ProbeError(f"not probed within {self.timeout_s} s: all probe workers busy")

    # -- introspection for tests and `hosts check` -----------------------------------------

    def connect_count(self, name: str) -> int:
        return self._link(name).connects

    def transport(self, name: str) -> paramiko.Transport | None:
        return self._link(name).transport

    def probe_one(self, target: HostTarget) -> HostStatus:
        """Probe one host; raises ProbeError with the reason."""
        result = self.probe_all([target])[target.name]
        if isinstance(result, ProbeError):
            raise result
        return result

    # -- one host -------------------------------------------------------------------------

    def _link(self, name: str) -> _HostLink:
        with self._links_lock:
            return self._links.setdefault(name, _HostLink())

    def _probe_guarded(
        self, target: HostTarget, deadline: RoundDeadline
    ) -> HostStatus | ProbeError:
        if deadline.expired():  # waited in the pool queue behind slower hosts all round
            return self._busy_error()
        link = self._link(target.name)
        try:
            # A previous round's worker may still be unwinding on this host.
            if not link.lock.acquire(timeout=deadline.remaining()):
                return ProbeError(f"timed out after {self.timeout_s} s (previous probe busy)")
            try:
                return self._probe_locked(target, link, deadline)
            finally:
                if self.fresh:
                    link.drop()
                link.lock.release()
        except ProbeError as exc:
            return exc
        except Exception as exc:  # a bug or an unforeseen library error: never kill the round
            log.exception("unexpected error probing %s", target.name)
            return ProbeError(f"probe error: {type(exc).__name__}: {exc}")

    def _probe_locked(
        self, target: HostTarget, link: _HostLink, deadline: RoundDeadline
    ) -> HostStatus:
        if link.transport is not None and not link.transport.is_active():
            link.drop()
        if link.transport is not None:
            try:
                return self._run_status(target, link.transport, deadline)
            except TransportBroken:
                link.drop()  # e.g. sshd restarted since last round: reconnect below
        link.transport = self._connect_with_backoff(target, link, deadline)
        try:
            return self._run_status(target, link.transport, deadline)
        except TransportBroken as exc:
            link.drop()
            raise ProbeError(str(exc)) from None

    def _connect_with_backoff(
        self, target: HostTarget, link: _HostLink, deadline: RoundDeadline
    ) -> paramiko.Transport:
        now = self._clock()
        if now < link.retry_at:
            raise ProbeError(f"{link.last_error} (reconnect in {link.retry_at - now:.1f} s)")
        try:
            transport = connect(target, deadline)
        except ProbeError as exc:
            link.failures += 1
            link.last_error = str(exc)
            delay = reconnect_delay_s(link.failures, *self._reconnect)
            link.retry_at = self._clock() + delay
            raise
        link.failures = 0
        link.retry_at = 0.0
        link.connects += 1
        return transport

    def _run_status(
        self, target: HostTarget, transport: paramiko.Transport, deadline: RoundDeadline
    ) -> HostStatus:
        # What the producer asks matters only where the key has no forced command: the
        # forced command (status_answer_command) answers whatever is asked.
        command = f"{self.command} --host {shlex.quote(target.name)}"
        out, err, code = run_command(transport, command, deadline)
        if code != 0:
            detail = last_line(err.decode(errors="replace"))
            raise ProbeError(
                f"status command exited with {code}" + (f": {_clip(detail)}" if detail else "")
            )
        answer = parse_status_answer(out)
        status = answer.status
        # Without a clock the answer came from an older forced command, which judged the age.
        if answer.host_clock is not None and (
            stale := stale_reason(status, answer.host_clock, self.stale_after_s)
        ):
            raise ProbeError(stale)
        if status.host != target.name:
            raise ProbeError(f"status is for host {status.host!r}, not {target.name!r}")
        return status

    def _log_transition(self, name: str, result: HostStatus | ProbeError) -> None:
        link = self._link(name)
        reason = str(result) if isinstance(result, ProbeError) else ""
        if reason != link.logged_reason:
            if reason:
                log.warning("probe of %s failed: %s", name, reason)
            else:
                log.info("probe of %s succeeds again", name)
            link.logged_reason = reason


def _clip(line: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """A host's own words in an error an operator reads: never the whole of a long line."""
    return line if len(line) <= limit else line[: limit - 3] + "..."
