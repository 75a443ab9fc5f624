"""One SSH connection to a consumer host, and one command run on it, within a probe round's
deadline (paramiko).

Kept apart from producer.probes.ssh_probe, which decides when to connect and what an answer means:
this module only knows how to reach a host safely and how to say in one line why it could not. Every
failure is a ProbeError whose message an operator reads in SQL; nothing from paramiko or the
socket layer escapes.

Security: key authentication only (no agent, no password, no keys found on disk by guessing),
and the server's host key must match the target's known_hosts file. An unknown or changed key
is refused, never added.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable

import paramiko

from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.answer import MAX_ANSWER_BYTES
from scrapefleet.producer.probes.local_probe import HostTarget


class RoundDeadline:
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


class TransportBroken(ProbeError):
    """The kept-open transport died under us; worth one reconnect in the same probe."""


def connect(target: HostTarget, deadline: RoundDeadline) -> paramiko.Transport:
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


def _open_socket(address: str, port: int, deadline: RoundDeadline) -> socket.socket:
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


def _connect_reason(target: HostTarget, exc: Exception, deadline: RoundDeadline) -> str:
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
    return f"ssh handshake with {target.name} failed: {first_line(text) or repr(exc)}"


def run_command(
    transport: paramiko.Transport, command: str, deadline: RoundDeadline
) -> tuple[bytes, bytes, int]:
    """Run command on a new channel; returns (stdout, stderr, exit code) or raises."""
    try:
        channel = transport.open_session(timeout=deadline.remaining())
    except ProbeError:
        raise
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise TransportBroken(f"cannot open ssh channel: {exc or type(exc).__name__}") from None
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
