"""Real SSH hosts on one machine for the fleet tests and the SSH benchmark.

Mode "netns": each host is a network namespace with its own veth on a Linux bridge in a private
test subnet (10.213.K.0/24, K picked free per run), its own sshd on port 22 with its own host
key, authorized_keys and state directory. Mode "loopback" (where namespaces are not permitted):
several sshd on 127.0.0.1 ports, same layout otherwise. Namespaces share the filesystem and the
process table, so files under a host's ``dir`` and a Unix-socket PostgreSQL are reachable from
inside a host.

Everything a run creates carries its run id: interface and namespace names start with
``sfl<run id>`` and every process it starts (sshd, its sessions, ``host.popen``) has the
environment marker SCRAPEFLEET_FLEET_RUN=<run id> (sshd: its config path under the run directory
in its command line). Teardown and the cleanup of a crashed run find their processes that way
and end them one PID at a time.

    with Fleet() as fleet:                   # or the fixtures in tests/fleet/conftest.py
        h1, h2, h3 = fleet.add_hosts(3)
        h1.serve_status(running=2)            # forced command answers with this status document
        probe.probe_all(fleet.targets())
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from scrapefleet.common.status.answer import status_answer_command
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probes.local_probe import HostTarget
from tests.host_status_factory import status_for

SSHD = "/usr/sbin/sshd"
REGISTRY = Path("/tmp/scrapefleet-fleet")  # one directory per run; /tmp is cleared on reboot
FAMILY = "sfl"  # name prefix of every namespace/interface; + 4-char run id (ifname <= 15)
SUBNET = "10.213"  # 10.213.K.0/24 per run; K chosen free under the registry lock
MARKER = "SCRAPEFLEET_FLEET_RUN"
FORCED_OPTIONS = "no-pty,no-port-forwarding,no-agent-forwarding,no-X11-forwarding"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def detect_mode() -> str:
    """'netns' if this process may create network namespaces, else 'loopback'."""
    forced = os.environ.get("SCRAPEFLEET_FLEET_MODE")
    if forced in ("netns", "loopback"):
        return forced
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "loopback"
    name = f"{FAMILY}probe{os.getpid() % 10000}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return "loopback"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return "netns"


def missing_prerequisites() -> list[str]:
    missing = [p for p in (SSHD,) if not os.access(p, os.X_OK)]
    missing += [c for c in ("ssh-keygen",) if not shutil.which(c)]
    return missing


class FleetHost:
    """One test host: its namespace (or port), sshd, keys and forced command."""

    def __init__(self, fleet: Fleet, index: int, name: str, address: str, port: int) -> None:
        self.fleet = fleet
        self.index = index
        self.name = name
        self.address = address
        self.port = port
        self.namespace = f"{fleet.prefix}h{index}" if fleet.mode == "netns" else None
        self.dir = fleet.root / name  # the host's own state directory
        self.dir.mkdir()
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.sshd_log = self.dir / "sshd.log"
        self.status_file = self.dir / "status.json"
        self.forced_command = self.dir / "forced-command"
        self._sshd: subprocess.Popen[bytes] | None = None
        _keygen(self.host_key, comment=name)
        shutil.copy(self.host_key, self.dir / "original_host_key")
        self.original_host_public_key = _public_key(self.host_key)
        self._write_sshd_config()
        self.authorize(fleet.client_public_key, command=str(self.forced_command))
        self.serve_status()

    # -- running things inside the host ---------------------------------------------------

    def argv(self, argv: Sequence[str]) -> list[str]:
        """argv prefixed to run inside this host's namespace (unchanged in loopback mode)."""
        prefix = ["ip", "netns", "exec", self.namespace] if self.namespace else []
        return [*prefix, *argv]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, MARKER: self.fleet.run_id, **(extra or {})}

    def run(self, argv: Sequence[str], timeout: float = 30.0, **kwargs: Any) -> Any:
        """subprocess.run inside the host (captures output, text mode, no check)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs["env"] = self.env(kwargs.get("env"))
        return subprocess.run(self.argv(argv), timeout=timeout, **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process inside the host (e.g. a consumer daemon); ended at teardown."""
        kwargs["env"] = self.env(kwargs.get("env"))
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(self.argv(argv), **kwargs)
        self.fleet._processes.append(process)
        return process

    # -- sshd -----------------------------------------------------------------------------

    @property
    def sshd_pid(self) -> int | None:
        return self._sshd.pid if self._sshd and self._sshd.poll() is None else None

    def start_sshd(self) -> None:
        if self.sshd_pid is not None:
            return
        with open(self.sshd_log, "ab") as log:
            self._sshd = subprocess.Popen(
                self.argv([SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")]),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        _wait_for_banner(self.address, self.port, self._sshd, self.sshd_log)

    def stop_sshd(self) -> None:
        """Kill sshd and its connections, as if the host went down (refuses new connects)."""
        if self._sshd is None:
            return
        _end_process_tree(self._sshd.pid)
        self._sshd.wait(STOP_TIMEOUT_S)
        self._sshd = None

    def restart_sshd(self) -> None:
        self.stop_sshd()
        self.start_sshd()

    def freeze_sshd(self) -> None:
        """Stop sshd (SIGSTOP): TCP connects still succeed, nothing answers (hangs)."""
        if pid := self.sshd_pid:
            os.kill(pid, signal.SIGSTOP)

    def thaw_sshd(self) -> None:
        if pid := self.sshd_pid:
            os.kill(pid, signal.SIGCONT)

    def swap_host_key(self) -> None:
        """Give sshd a new host key (known_hosts keeps the old one) and restart it."""
        self.host_key.unlink()
        self.host_key.with_suffix(".pub").unlink(missing_ok=True)
        _keygen(self.host_key, comment=f"{self.name}-swapped")
        self.restart_sshd()

    def restore_host_key(self) -> None:
        if _public_key(self.host_key) == self.original_host_public_key:
            return
        shutil.copy(self.dir / "original_host_key", self.host_key)
        self.host_key.with_suffix(".pub").write_text(self.original_host_public_key + "\n")
        self.restart_sshd()

    # -- what the host answers ------------------------------------------------------------

    def authorize(
        self, public_key: str, command: str | None, options: str = FORCED_OPTIONS
    ) -> None:
        """Replace authorized_keys with one line for public_key (forced command + options)."""
        prefix = f'command="{command}",{options} ' if command else ""
        _atomic_write(self.dir / "authorized_keys", f"{prefix}{public_key}\n", mode=0o600)

    def set_forced_command(self, shell_body: str) -> None:
        """What the forced command does (sh). $FLEET_HOST_DIR is this host's directory;
        $SSH_ORIGINAL_COMMAND what the client asked for (also saved to last-command)."""
        script = (
            "#!/bin/sh\n"
            f"# forced command of fleet host {self.name} (tests/fleet/harness.py)\n"
            f"FLEET_HOST_DIR={self.dir}; {MARKER}={self.fleet.run_id}\n"
            f"export FLEET_HOST_DIR {MARKER}\n"
            'printf "%s\\n" "$SSH_ORIGINAL_COMMAND" > "$FLEET_HOST_DIR/last-command"\n'
            f"{shell_body}\n"
        )
        _atomic_write(self.forced_command, script, mode=0o755)

    def serve_status(self, status: HostStatus | None = None, **fields: Any) -> HostStatus:
        """The product's answer (the host's clock, then the document) with a valid status
        document (defaults + fields)."""
        status = status or default_status(self.name, **fields)
        _atomic_write(self.status_file, status.to_json())
        self.set_forced_command(status_answer_command(self.status_file))
        return status

    def last_command(self) -> str:
        path = self.dir / "last-command"
        return path.read_text().strip() if path.exists() else ""

    def target(self, **overrides: Any) -> HostTarget:
        values: dict[str, Any] = {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.fleet.user,
            "key_file": str(self.fleet.client_key),
            "known_hosts_file": str(self.fleet.known_hosts),
        }
        return HostTarget(**{**values, **overrides})

    def reset(self) -> None:
        """Back to the healthy baseline: original key, sshd running, valid status."""
        self.thaw_sshd()
        self.restore_host_key()
        self.authorize(self.fleet.client_public_key, command=str(self.forced_command))
        self.serve_status()
        self.start_sshd()

    def _write_sshd_config(self) -> None:
        config = f"""\
# sshd of fleet host {self.name} (tests/fleet/harness.py)
ListenAddress {self.address}:{self.port}
HostKey {self.host_key}
PidFile {self.dir / "sshd.pid"}
AuthorizedKeysFile {self.dir / "authorized_keys"}
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthenticationMethods publickey
PermitRootLogin prohibit-password
# The host directories live under /tmp (mode 1777), which StrictModes rejects.
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 200
MaxSessions 64
LogLevel VERBOSE
# The tests log in as the current user (root), whose bash would source ~/.bashrc for every
# command run over ssh; bash skips that when SHLVL says it is not the first shell. A real
# service user has a minimal shell (/bin/sh) instead.
SetEnv SHLVL=1
# Allowed server-wide so that refusals in the tests come from the key's own options.
AllowTcpForwarding yes
AllowAgentForwarding yes
"""
        (self.dir / "sshd_config").write_text(config)


def default_status(host: str, **fields: Any) -> HostStatus:
    return status_for(host, **fields)


class Fleet:
    """A set of test hosts; a context manager that removes everything it created."""

    def __init__(self, mode: str | None = None, user: str | None = None) -> None:
        if missing := missing_prerequisites():
            raise RuntimeError(f"missing {', '.join(missing)}: run .ci/install-fleet.sh")
        self.mode = mode or detect_mode()
        # Log in as the user running the tests: the harness creates no system accounts.
        self.user = user or _current_user()
        self.hosts: dict[str, FleetHost] = {}
        self._processes: list[subprocess.Popen[Any]] = []
        self._closed = False
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation dir
        REGISTRY.mkdir(parents=True, exist_ok=True)
        with _registry_lock():
            cleanup_leftovers()
            self.run_id = _new_run_id()
            self.prefix = f"{FAMILY}{self.run_id}"
            self.root = REGISTRY / self.run_id
            self.root.mkdir()
            self.octet = _free_octet() if self.mode == "netns" else None
            owner = {"pid": os.getpid(), "start": _start_time(os.getpid()), "octet": self.octet}
            (self.root / "owner.json").write_text(json.dumps(owner))
        try:
            self.client_key = self.root / "client_ed25519"
            _keygen(self.client_key, comment="scrapefleet-producer")
            self.client_public_key = _public_key(self.client_key)
            self.known_hosts = self.root / "known_hosts"
            self.known_hosts.write_text("")
            self.bridge = f"{self.prefix}br" if self.mode == "netns" else None
            self.gateway = f"{SUBNET}.{self.octet}.1" if self.mode == "netns" else "127.0.0.1"
            if self.bridge:
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        print(f"fleet harness: mode={self.mode} run={self.run_id} dir={self.root}", flush=True)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str | None = None) -> FleetHost:
        index = len(self.hosts) + 1
        name = name or f"h{index}"
        if self.mode == "netns":
            address, port = f"{SUBNET}.{self.octet}.{10 + index}", 22
            self._make_namespace(f"{self.prefix}h{index}", f"{self.prefix}v{index}", address)
        else:
            address, port = "127.0.0.1", _free_port()
        host = FleetHost(self, index, name, address, port)
        self.hosts[name] = host
        self._write_known_hosts()
        host.start_sshd()
        return host

    def add_hosts(self, count: int) -> list[FleetHost]:
        return [self.add_host() for _ in range(count)]

    def targets(self, **overrides: Any) -> list[HostTarget]:
        return [h.target(**overrides) for h in self.hosts.values()]

    def reset(self) -> None:
        for host in self.hosts.values():
            host.reset()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Everything at once: 50 hosts stopped one by one would take seconds.
        started = [p for p in self._processes if p.poll() is None]
        sshds = [h._sshd for h in self.hosts.values() if h._sshd is not None]
        _end_processes([p.pid for p in started + sshds])
        for process in started + sshds:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_S)
        with _registry_lock():
            _remove_run(self.run_id)

    def _make_namespace(self, namespace: str, veth: str, address: str) -> None:
        _ip("netns", "add", namespace)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", veth, "master", str(self.bridge), "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")

    def _write_known_hosts(self) -> None:
        lines = []
        for host in self.hosts.values():
            pattern = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
            key_type, key_b64 = host.original_host_public_key.split()[:2]
            lines.append(f"{pattern} {key_type} {key_b64}\n")
        _atomic_write(self.known_hosts, "".join(lines))


# -- cleanup of this run and of crashed runs -----------------------------------------------


def cleanup_leftovers() -> None:
    """Remove what runs whose owner process is gone left behind (call under the lock)."""
    live = set()
    for run_dir in REGISTRY.iterdir() if REGISTRY.exists() else []:
        if not run_dir.is_dir():
            continue
        if _owner_alive(run_dir / "owner.json"):
            live.add(run_dir.name)
        else:
            _remove_run(run_dir.name)
    # Names and sshd of a run whose directory is already gone (crash during teardown).
    orphans = {name[len(FAMILY) : len(FAMILY) + 4] for name in _our_namespaces() + _our_links()}
    orphans |= _run_ids_of_sshd()
    for run_id in orphans - live:
        _remove_run(run_id)


def _run_ids_of_sshd() -> set[str]:
    """Run ids in the command lines of running sshd started by this harness."""
    needle = f"{REGISTRY}/".encode()
    run_ids = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            if needle in cmdline and b"sshd" in cmdline:
                run_ids.add(cmdline.split(needle, 1)[1].split(b"/", 1)[0].decode())
    return run_ids


def _remove_run(run_id: str) -> None:
    prefix = f"{FAMILY}{run_id}"
    _end_processes(_marked_pids(run_id))
    for namespace in _our_namespaces():
        if namespace.startswith(prefix):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
    for link in _our_links():
        if link.startswith(prefix):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
    shutil.rmtree(REGISTRY / run_id, ignore_errors=True)


def _marked_pids(run_id: str) -> list[int]:
    """PIDs of this run: the environment marker (popen'd processes, forced-command sessions)
    or the run directory in the command line (sshd rewrites its environ area with its
    process title, which keeps its -f config path)."""
    marker = f"{MARKER}={run_id}".encode()
    run_dir = f"{REGISTRY / run_id}/".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if run_dir in (entry / "cmdline").read_bytes() or marker in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def _our_namespaces() -> list[str]:
    if not shutil.which("ip"):
        return []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(FAMILY)]


def _our_links() -> list[str]:
    if not shutil.which("ip"):
        return []
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n.startswith(FAMILY)]


def _end_process_tree(pid: int) -> None:
    _end_processes([pid])


def _end_processes(pids: Sequence[int]) -> None:
    """SIGTERM these PIDs and their descendants, SIGKILL what is left after a deadline."""
    import psutil

    tree: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                tree[process.pid] = process
    for process in tree.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
            process.resume()  # a SIGSTOPped process only acts on SIGTERM once continued
    alive = list(tree.values())
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.01)  # poll interval, bounded by the deadline
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _running(process: Any) -> bool:
    """Alive and not a zombie (zombies of our children are reaped by their Popen)."""
    import psutil

    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def _registry_lock() -> Iterator[None]:
    REGISTRY.mkdir(parents=True, exist_ok=True)
    with open(REGISTRY / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _owner_alive(owner_file: Path) -> bool:
    try:
        owner = json.loads(owner_file.read_text())
    except (OSError, ValueError):
        return False
    started = _start_time(owner["pid"])
    return started is not None and started == owner["start"]


def _start_time(pid: int) -> int | None:
    """Process start time in clock ticks: tells a live owner from a reused PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _new_run_id() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    for _ in range(100):
        run_id = "".join(secrets.choice(alphabet) for _ in range(4))
        if not (REGISTRY / run_id).exists():
            return run_id
    raise RuntimeError("no free fleet run id")


def _free_octet() -> int:
    """A third octet K such that no interface here has an address in 10.213.K.0/24."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used = {int(w.split(".")[2]) for w in out.split() if w.startswith(f"{SUBNET}.")}
    for run_dir in REGISTRY.iterdir():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            used.add(int(json.loads((run_dir / "owner.json").read_text())["octet"]))
    for octet in range(256):
        if octet not in used:
            return octet
    raise RuntimeError(f"no free /24 in {SUBNET}.0.0/16")


# -- small helpers -------------------------------------------------------------------------


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _public_key(private_key: Path) -> str:
    return private_key.with_suffix(".pub").read_text().strip()


def _atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_banner(address: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}: {log.read_text()[-500:]}")
        with contextlib.suppress(OSError), socket.create_connection((address, port), 0.5) as sock:
            sock.settimeout(1.0)
            if sock.recv(64).startswith(b"SSH-"):
                return
        time.sleep(0.02)  # poll interval while sshd binds, bounded by the deadline
    raise RuntimeError(f"sshd on {address}:{port} not ready in {START_TIMEOUT_S} s")
