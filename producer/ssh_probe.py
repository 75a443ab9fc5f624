"""Probe consumer hosts over SSH (paramiko) for their status document.

One Transport per host stays open across rounds: connect + key exchange + auth costs several
round trips and CPU on both sides, while a command on an open Transport is one channel. Every
failure becomes a ProbeError whose one-line message is what an operator reads in SQL; nothing
from paramiko or the socket layer escapes ``probe_all``.

What a host answers (common.status.answer): its clock, then its status document, from a forced
command that starts only sh, date and cat; the document's age is judged here on that clock.

Security: key authentication only (no agent, no password, no keys found on disk by guessing),
and the server's host key must match the target's known_hosts file. An unknown or changed key
is refused, never added.
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import paramiko

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.settings import Settings, setting_default
from scrapefleet.common.status.answer import MAX_ANSWER_BYTES, parse_status_answer, stale_reason
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probe import HostTarget

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


class _Deadline:
    """The round's deadline, shared by every host of the round: a host that starts late
    (pool busy) gets what is left, so no host keeps the round past timeout_s."""

    def __init__(self, timeout_s: float, at: float, clock: Callable[[], float]) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._at = at

    def expired(self) -> bool:
        return self._clock() >= self._at

    def remaining(self) -> float:
        left = self._at - self._clock()
        if left <= 0:
            raise ProbeError(f"timed out after {self.timeout_s} s")
        return left


class SSHProbe:
    """Implements producer.probe.Probe over SSH."""

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
        deadline = _Deadline(self.timeout_s, self._clock() + self.timeout_s, self._clock)
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

    def _probe_guarded(self, target: HostTarget, deadline: _Deadline) -> HostStatus | ProbeError:
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

    def _probe_locked(self, target: HostTarget, link: _HostLink, deadline: _Deadline) -> HostStatus:
        if link.transport is not None and not link.transport.is_active():
            link.drop()
        if link.transport is not None:
            try:
                return self._run_status(target, link.transport, deadline)
            except _TransportBroken:
                link.drop()  # e.g. sshd restarted since last round: reconnect below
        link.transport = self._connect_with_backoff(target, link, deadline)
        try:
            return self._run_status(target, link.transport, deadline)
        except _TransportBroken as exc:
            link.drop()
            raise ProbeError(str(exc)) from None

    def _connect_with_backoff(
        self, target: HostTarget, link: _HostLink, deadline: _Deadline
    ) -> paramiko.Transport:
        now = self._clock()
        if now < link.retry_at:
            raise ProbeError(f"{link.last_error} (reconnect in {link.retry_at - now:.1f} s)")
        try:
            transport = _connect(target, deadline)
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
        self, target: HostTarget, transport: paramiko.Transport, deadline: _Deadline
    ) -> HostStatus:
        # What the producer asks matters only where the key has no forced command: the
        # forced command (status_answer_command) answers whatever is asked.
        command = f"{self.command} --host {shlex.quote(target.name)}"
        out, err, code = _exec(transport, command, deadline)
        if code != 0:
            detail = err.decode(errors="replace").strip().splitlines()
            raise ProbeError(
                f"status command exited with {code}" + (f": {_clip(detail[-1])}" if detail else "")
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


class _TransportBroken(ProbeError):
    """The kept-open transport died under us; worth one reconnect in the same probe."""


def _connect(target: HostTarget, deadline: _Deadline) -> paramiko.Transport:
    """Open, verify and authenticate a Transport, or raise ProbeError with the reason."""
    if not target.address:
        raise ProbeError(f"host {target.name} has no address for the SSH probe")
    if not target.key_file:
        raise ProbeError(f"host {target.name} has no SSH key file configured")
    known = _known_host_keys(target)
    pkey = _load_key(target.key_file)
    sock = _open_socket(target.address, target.port, deadline)
    transport = paramiko.Transport(sock)
    try:
        # Only negotiate key types we can verify, so a host with several keys offers a known one.
        options = transport.get_security_options()
        options.key_types = [k for k in options.key_types if _base_type(k) in known] or list(
            options.key_types
        )
        transport.banner_timeout = transport.handshake_timeout = deadline.remaining()
        transport.auth_timeout = deadline.remaining()
        transport.start_client(timeout=deadline.remaining())
        _verify_host_key(target, transport.get_remote_server_key(), known)
        transport.auth_publickey(target.user, pkey)
        if not transport.is_authenticated():
            raise ProbeError(f"authentication failed for {target.user}@{target.name}")
        return transport
    except ProbeError:
        transport.close()
        raise
    except Exception as exc:
        transport.close()
        raise ProbeError(_connect_reason(target, exc, deadline)) from None


def _open_socket(address: str, port: int, deadline: _Deadline) -> socket.socket:
    try:
        sock = socket.create_connection((address, port), timeout=deadline.remaining())
    except ConnectionRefusedError:
        raise ProbeError("connection refused") from None
    except TimeoutError:
        raise ProbeError(f"timed out after {deadline.timeout_s} s (connect)") from None
    except socket.gaierror as exc:
        raise ProbeError(f"cannot resolve {address}: {exc.strerror}") from None
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        raise ProbeError(f"cannot connect to {address}:{port}: {exc.strerror or name}") from None
    # Without TCP_NODELAY each small SSH packet waits for a delayed ACK (~40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _base_type(key_type: str) -> str:
    """rsa-sha2-* are signature algorithms over an ssh-rsa key."""
    return "ssh-rsa" if key_type.startswith("rsa-sha2-") else key_type


def _known_host_keys(target: HostTarget) -> dict[str, paramiko.PKey]:
    if not target.known_hosts_file:
        raise ProbeError(f"host {target.name} has no known_hosts file configured")
    try:
        keys = paramiko.HostKeys(target.known_hosts_file)
    except OSError as exc:
        raise ProbeError(f"cannot read {target.known_hosts_file}: {exc.strerror}") from None
    entry = keys.lookup(_known_hosts_name(target))
    if not entry:
        raise ProbeError(
            f"host key for {target.name} unknown: {_known_hosts_name(target)} "
            f"not in {target.known_hosts_file}"
        )
    return dict(entry)


def _known_hosts_name(target: HostTarget) -> str:
    address = target.address or ""
    return address if target.port == 22 else f"[{address}]:{target.port}"


def _verify_host_key(
    target: HostTarget, key: paramiko.PKey, known: dict[str, paramiko.PKey]
) -> None:
    expected = known.get(key.get_name())
    if expected is None or expected != key:
        raise ProbeError(
            f"host key for {target.name} changed: server offers {key.get_name()} "
            f"{key.fingerprint}, not the key in {target.known_hosts_file}"
        )


_KEY_CACHE: dict[str, paramiko.PKey] = {}
_KEY_CACHE_LOCK = threading.Lock()


def _load_key(path: str) -> paramiko.PKey:
    with _KEY_CACHE_LOCK:
        if path not in _KEY_CACHE:
            try:
                _KEY_CACHE[path] = paramiko.PKey.from_path(path)
            except OSError as exc:
                raise ProbeError(f"cannot read key file {path}: {exc.strerror}") from None
            except (paramiko.SSHException, ValueError) as exc:
                raise ProbeError(f"cannot load key file {path}: {exc}") from None
        return _KEY_CACHE[path]


def _connect_reason(target: HostTarget, exc: Exception, deadline: _Deadline) -> str:
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {target.user}@{target.name}"
    text = str(exc)
    lowered = text.lower()
    expired = deadline.expired()
    if expired or isinstance(exc, TimeoutError) or "timeout" in lowered or "timed out" in lowered:
        return f"timed out after {deadline.timeout_s} s (ssh handshake)"
    if "no acceptable host key" in lowered or "incompatible" in lowered:
        return f"host key for {target.name} changed: no key of the type in known_hosts offered"
    if isinstance(exc, EOFError | ConnectionResetError) or "banner" in lowered:
        return f"connection closed by {target.name} during ssh handshake"
    return f"ssh handshake with {target.name} failed: {text.splitlines()[0] if text else exc!r}"


def _exec(
    transport: paramiko.Transport, command: str, deadline: _Deadline
) -> tuple[bytes, bytes, int]:
    """Run command on a new channel; returns (stdout, stderr, exit code) or raises."""
    try:
        channel = transport.open_session(timeout=deadline.remaining())
    except ProbeError:
        raise
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise _TransportBroken(f"cannot open ssh channel: {exc or type(exc).__name__}") from None
    try:
        channel.settimeout(deadline.remaining())
        channel.exec_command(command)
        channel.shutdown_write()  # the status command reads no input
        out = bytearray()
        while True:
            channel.settimeout(deadline.remaining())
            chunk = channel.recv(32768)
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_ANSWER_BYTES:
                raise ProbeError(f"status output larger than {MAX_ANSWER_BYTES} bytes")
        if not channel.status_event.wait(deadline.remaining()):
            deadline.remaining()  # raises the timeout
        err = bytearray()
        while channel.recv_stderr_ready() and len(err) < MAX_ANSWER_BYTES:
            err += channel.recv_stderr(32768)
        return bytes(out), bytes(err), channel.recv_exit_status()
    except TimeoutError:
        raise ProbeError(f"timed out after {deadline.timeout_s} s (status command)") from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise ProbeError(f"ssh channel failed: {exc or type(exc).__name__}") from None
    finally:
        channel.close()
