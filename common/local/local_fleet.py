"""A producer and consumer hosts as real subprocesses on this machine (demo, tests, benchmarks).

Each daemon runs in its own process group so that it, and only it, can be signalled; stop()
sends SIGTERM, waits, then SIGKILLs what is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

BIN = Path(sys.executable).parent


class LocalFleet:
    def __init__(
        self,
        database_url: str,
        state_dir: Path,
        hosts: list[str],
        *,
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
        producers: int = 1,
    ) -> None:
        self.database_url = database_url
        self.state_dir = state_dir
        self.hosts = hosts
        self.producers = producers
        self.log_dir = log_dir or state_dir / "logs"
        self.env = {
            **os.environ,
            "SCRAPEFLEET_DATABASE_URL": database_url,
            "SCRAPEFLEET_STATE_DIR": str(state_dir),
            **(env or {}),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start_producer(self, name: str = "producer") -> subprocess.Popen[bytes]:
        return self._spawn(name, [str(BIN / "scrapefleet-producer")])

    def start_consumer(
        self, host: str, extra_env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        return self._spawn(
            f"consumer-{host}",
            # --register: a local fleet's hosts are its own, made up by whoever starts it.
            [str(BIN / "scrapefleet-consumer"), "run", "--host", host, "--register"],
            extra_env,
        )

    def start(self) -> LocalFleet:
        for host in self.hosts:
            self.start_consumer(host)
        for index in range(self.producers):
            self.start_producer("producer" if index == 0 else f"producer-{index + 1}")
        return self

    def _spawn(
        self, name: str, argv: list[str], extra_env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                argv,
                env={**self.env, **(extra_env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: signalled alone, by PID
            )
        self.processes[name] = process
        return process

    def signal(self, name: str, signum: int) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signum)

    def stop(self, timeout_s: float = 20.0) -> dict[str, int | None]:
        """SIGTERM everything, wait up to ``timeout_s``, SIGKILL the rest; returns exit codes."""
        for name in self.processes:
            self._quietly(name, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for name, process in self.processes.items():
            if process.poll() is None:
                self._quietly(name, signal.SIGKILL)
                process.wait(5)
        return {name: p.returncode for name, p in self.processes.items()}

    def _quietly(self, name: str, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.signal(name, signum)

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
