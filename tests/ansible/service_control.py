"""A stand-in for systemctl on the test hosts, where systemd is not PID 1: the roles call it as
their scrapefleet_service_command, `service_control.py [--marker RUN] ACTION UNIT_FILE`.

It runs what the unit file says the way systemd would, closely enough for the tests: ExecStart
as User=/Group= with only Environment= (and the fleet harness's marker, so that the harness ends
every daemon at teardown), in a session of its own, output appended to <unit>.log, the main PID
in <unit>.pid. stop is SIGTERM, then SIGKILL after TimeoutStopSec, then (KillMode=mixed) the
rest of the unit's processes. It prints "changed: ..." when it changed something, "ok: ..."
otherwise, as the roles' changed_when reads it. Standard library only: the hosts' python3.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT_TAG = "SCRAPEFLEET_TEST_UNIT"  # in each daemon's environment: finds what it left behind
START_SETTLE_S = 1.0  # a daemon that dies at once (bad settings) is reported as failed
DEFAULT_STOP_TIMEOUT_S = 90.0


def parse_unit(text: str) -> dict[str, list[str]]:
    """key -> values of a systemd unit file (all sections; enough for ExecStart and User)."""
    values: dict[str, list[str]] = {"Environment": []}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _tagged(unit_file: Path) -> list[int]:
    tag = f"{UNIT_TAG}={unit_file}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if tag in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def main_pid(unit_file: Path) -> int | None:
    pid_file = unit_file.with_name(unit_file.name + ".pid")
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text())
        if _alive(pid) and pid in _tagged(unit_file):  # not a reused PID
            return pid
    return None


def _identity(unit: dict[str, list[str]]) -> list[str]:
    """A unit with AmbientCapabilities= starts as its User= with those capabilities kept, as
    systemd does it: through setpriv (util-linux). Empty: no capabilities to keep."""
    caps = " ".join(unit.get("AmbientCapabilities", [])).split()
    if not caps:
        return []
    names = ",".join("+" + c.lower().removeprefix("cap_") for c in caps)
    return ["setpriv", f"--reuid={unit['User'][0]}", f"--regid={unit['Group'][0]}",
            "--clear-groups", f"--inh-caps={names}", f"--ambient-caps={names}", "--"]  # fmt: skip


def start(unit_file: Path, marker: str | None) -> str:
    if (pid := main_pid(unit_file)) is not None:
        return f"ok: running as {pid}"
    unit = parse_unit(unit_file.read_text())
    env = {"PATH": "/usr/bin:/bin", UNIT_TAG: str(unit_file)}
    if marker:
        env["SCRAPEFLEET_FLEET_RUN"] = marker
    env.update(dict(item.split("=", 1) for item in unit["Environment"]))
    log = open(unit_file.with_name(unit_file.name + ".log"), "ab")  # noqa: SIM115 - the child's
    argv, identity = shlex.split(unit["ExecStart"][0]), _identity(unit)
    process = subprocess.Popen(
        [*identity, *argv] if identity else argv,
        env=env,
        **({} if identity else {"user": unit["User"][0], "group": unit["Group"][0]}),
        extra_groups=[] if not identity else None,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    unit_file.with_name(unit_file.name + ".pid").write_text(str(process.pid))
    time.sleep(START_SETTLE_S)  # not a wait for a condition: how long "dies at once" is
    if process.poll() is not None:
        sys.exit(f"failed: {unit_file.name} exited with {process.returncode} at start")
    return f"changed: started as {process.pid}"


def stop(unit_file: Path) -> str:
    pid = main_pid(unit_file)
    leftovers = _tagged(unit_file)
    if pid is None and not leftovers:
        return "ok: not running"
    timeout = float(parse_unit(unit_file.read_text()).get("TimeoutStopSec", [""])[0] or 0)
    deadline = time.monotonic() + (timeout or DEFAULT_STOP_TIMEOUT_S)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # poll period, bounded by the deadline
    for other in _tagged(unit_file):  # the main PID if it outlived its timeout, then the rest
        with contextlib.suppress(ProcessLookupError):
            os.kill(other, signal.SIGKILL)
    return f"changed: stopped {pid if pid is not None else 'leftovers'}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker")
    parser.add_argument("action", choices=["started", "stopped", "restarted", "status"])
    parser.add_argument("unit_file", type=Path)
    args = parser.parse_args()
    if args.action == "status":
        pid = main_pid(args.unit_file)
        print(f"active: {pid}" if pid is not None else "inactive")
        sys.exit(0 if pid is not None else 3)
    if args.action == "stopped":
        print(stop(args.unit_file))
    elif args.action == "started":
        print(start(args.unit_file, args.marker))
    else:
        stop(args.unit_file)
        print("changed: re" + start(args.unit_file, args.marker).removeprefix("changed: "))


if __name__ == "__main__":
    main()
