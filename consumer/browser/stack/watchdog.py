"""A browser stack ends with the process that started it, however that process ends.

Xvfb and the Grid run in sessions of their own (the starter's terminal signals are not theirs),
so a consumer killed with SIGKILL would leave them, the drivers and the browsers running, still
loading the page of an attempt that is over. ``PR_SET_PDEATHSIG`` is no answer: it fires when
the *thread* that forked exits, and stacks are started from helper threads that end at once.

So each started stack has a watchdog: a small process in a session of its own that reads a pipe
whose write end only the starter holds (subprocess's pipes are close-on-exec: no stack process
inherits it). The starter sends the stack's marker, then its PIDs as they start; at its stop it
sends ``done`` and the watchdog exits. When the pipe ends without ``done`` (the starter died,
whatever the signal), the watchdog ends every process of the stack, found by its marker
(consumer.browser.stack.processes: by more than parentage), and exits.

    python -c 'from scrapefleet.consumer.browser.stack.watchdog import main; main()'
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import IO

import psutil

from scrapefleet.consumer.browser.stack.processes import StackMarker, end_stack_processes

DONE = "done"
RELEASE_WAIT_S = 2.0  # for the watchdog to read ``done`` and exit, before it is left to itself


class StackWatchdog:
    """The watchdog of one stack's processes, started now."""

    def __init__(self, marker: StackMarker, stop_timeout_s: float) -> None:
        # This process's own import path: the browser agent runs from a launcher that adds its
        # site directories at run time, which ``-m`` alone would not see.
        code = f"import sys; sys.path[:0] = {sys.path!r}; from {__name__} import main; main()"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the starter's process group is not its end
        )
        first = {
            "token": marker.token,
            "tmp_dir": str(marker.tmp_dir),
            "work_dir": str(marker.work_dir),
            "stop_timeout_s": stop_timeout_s,
        }
        self._send(json.dumps(first))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def watch(self, pid: int) -> None:
        """A process the stack started (Xvfb, the Grid): ended with the rest, with its tree."""
        self._send(f"pid {pid}")

    def release(self) -> None:
        """The stack was stopped by its starter: the watchdog exits without ending anything."""
        self._send(DONE)
        with contextlib.suppress(OSError):
            self._close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(RELEASE_WAIT_S)  # reaped: no zombie left

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):  # a watchdog that died cannot be told anything
            pipe = self._pipe()
            pipe.write(f"{line}\n".encode())
            pipe.flush()

    def _pipe(self) -> IO[bytes]:
        if self._proc.stdin is None:
            raise OSError("watchdog pipe closed")
        return self._proc.stdin

    def _close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()


def watch(lines: IO[bytes]) -> bool:
    """Read the starter's lines until ``done`` (True) or the end of the pipe; at the end, end
    the stack's processes and return False."""
    header = json.loads(lines.readline() or b"null")
    if not isinstance(header, dict):
        return True  # nothing was started under watch
    marker = StackMarker(header["token"], Path(header["tmp_dir"]), Path(header["work_dir"]))
    # Held as psutil processes (their start time with them): a root that ended long ago and whose
    # PID was reused by another program is not taken for the stack's.
    roots: list[psutil.Process] = []
    for raw in lines:
        line = raw.decode(errors="replace").strip()
        if line == DONE:
            return True
        if line.startswith("pid "):
            with contextlib.suppress(ValueError, psutil.Error):
                roots.append(psutil.Process(int(line.split()[1])))
    alive = [root.pid for root in roots if root.is_running()]
    end_stack_processes(marker, alive, float(header["stop_timeout_s"]))
    return False


def main() -> None:
    watch(sys.stdin.buffer)


if __name__ == "__main__":
    main()
