"""Find and end the processes of one browser stack, by more than parentage.

Chromium does not stay in the tree of the Grid that launched it: ``chrome_crashpad_handler``
double-forks away at once, and renderers still starting when their browser dies are
reparented to init. So a stack is recognised by three marks, any of which is enough:

- a descendant of a process the stack launched (Xvfb, the Grid's java);
- an environment that carries the stack's token variable or its own TMPDIR (every child of
  the Grid inherits both; Chromium keeps its environment across its zygote forks);
- a command line naming the stack's work directory (``--user-data-dir=<TMPDIR>/...``).

Nothing is ever matched by process name: two stacks on one host, or a developer's own
Chromium, must never be touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

TOKEN_ENV = "SCRAPEFLEET_STACK_TOKEN"  # set in the Grid's environment, inherited by its browsers
# The stack's work directory, in the environment of Xvfb and the Grid: unlike the token it is the
# same for the next stack of the same consumer host, which can so find and end what a consumer
# killed with SIGKILL left running (Xvfb names nothing of ours on its command line).
WORK_DIR_ENV = "SCRAPEFLEET_STACK_DIR"
_WAIT_STEP_S = 0.05


@dataclass(frozen=True)
class StackMarker:
    """What identifies the processes of one stack."""

    token: str
    tmp_dir: Path
    work_dir: Path

    def matches(self, proc: psutil.Process) -> bool:
        try:
            if any(self._names_our_dir(arg) for arg in proc.cmdline()):
                return True
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            return False
        return (
            env.get(TOKEN_ENV) == self.token
            or env.get("TMPDIR") == str(self.tmp_dir)
            or env.get(WORK_DIR_ENV) == str(self.work_dir)
        )

    def _names_our_dir(self, arg: str) -> bool:
        # With the trailing separator, so that stack "w1" never matches stack "w10".
        return any(
            f"{folder}{os.sep}" in arg or arg.endswith(str(folder))
            for folder in (self.work_dir, self.tmp_dir)
        )


def _protected_pids() -> set[int]:
    """This process and its ancestors: never candidates, whatever their command line says."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in psutil.Process().parents())
    return pids


def is_gone(proc: psutil.Process) -> bool:
    """Ended, or a zombie (dead, holds no memory; its parent or init will reap it)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def find_stack_processes(marker: StackMarker, roots: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live process of the stack: the roots, their descendants and marked processes."""
    protected = _protected_pids()
    found: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                found[proc.pid] = proc
        except psutil.Error:
            continue
    for proc in psutil.process_iter():
        if proc.pid not in found and proc.pid not in protected and marker.matches(proc):
            found[proc.pid] = proc
    return [p for pid, p in found.items() if pid not in protected and not is_gone(p)]


def _signal_all(procs: Iterable[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):  # already gone
            proc.send_signal(sig)  # psutil checks the PID was not reused before signalling


def _wait_gone(procs: list[psutil.Process], deadline: float) -> list[psutil.Process]:
    alive = [p for p in procs if not is_gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(_WAIT_STEP_S)
        alive = [p for p in alive if not is_gone(p)]
    return alive


@dataclass(frozen=True)
class KillResult:
    ended: int  # distinct processes that were alive and are gone now
    sigkilled: int  # of those, how many needed SIGKILL
    leftover_pids: tuple[int, ...]  # still alive after every deadline (should be empty)


def end_stack_processes(marker: StackMarker, roots: Iterable[int], timeout_s: float) -> KillResult:
    """SIGTERM every process of the stack, SIGKILL what remains; repeat the search until
    nothing marked is left, since a dying browser can still spawn a late child."""
    roots = list(roots)
    deadline = time.monotonic() + timeout_s
    term_deadline = time.monotonic() + timeout_s / 2
    seen: dict[int, psutil.Process] = {}
    sigkilled: set[int] = set()
    while True:
        procs = [p for p in find_stack_processes(marker, roots) if p.pid not in sigkilled]
        seen.update((p.pid, p) for p in procs)
        if not procs:
            break
        _signal_all(procs, signal.SIGTERM)
        alive = _wait_gone(procs, term_deadline)
        if alive:
            _signal_all(alive, signal.SIGKILL)
            sigkilled.update(p.pid for p in alive)
            _wait_gone(alive, deadline)
        if time.monotonic() >= deadline:
            break
    leftover = tuple(p.pid for p in find_stack_processes(marker, roots))
    ended = sum(1 for pid, proc in seen.items() if pid not in leftover and is_gone(proc))
    return KillResult(ended=ended, sigkilled=len(sigkilled - set(leftover)), leftover_pids=leftover)


def pss_bytes(procs: Iterable[psutil.Process]) -> int:
    """Proportional set size summed: shared pages counted once across the processes."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue  # ended meanwhile, or a platform without PSS
    return total


def processes_naming(folder: Path) -> list[psutil.Process]:
    """The live processes whose command line names ``folder`` (one browser session's profile
    directory: its Chromium and every helper of it)."""
    needle = str(folder)
    protected = _protected_pids()
    procs = []
    for proc in psutil.process_iter():
        if proc.pid in protected:
            continue
        with contextlib.suppress(psutil.Error):
            if any(needle in arg for arg in proc.cmdline()):
                procs.append(proc)
    return procs


def end_processes_naming(folder: Path, timeout_s: float) -> int:
    """End the processes whose command line names ``folder``; returns how many were found."""
    return kill_and_wait(processes_naming(folder), timeout_s)


def kill_and_wait(procs: list[psutil.Process], timeout_s: float) -> int:
    """SIGKILL ``procs`` (a hung renderer is why we are here: no SIGTERM round) and wait up
    to ``timeout_s`` for them to be gone; returns how many there were."""
    _signal_all(procs, signal.SIGKILL)
    _wait_gone(procs, time.monotonic() + timeout_s)
    return len(procs)


def await_exit(procs: list[psutil.Process], timeout_s: float) -> int:
    """Wait for ``procs`` to exit by themselves, for up to ``timeout_s``; SIGKILL the ones still
    alive then (and wait for them as long again). Returns how many had to be killed."""
    alive = _wait_gone(procs, time.monotonic() + timeout_s)
    if alive:
        _signal_all(alive, signal.SIGKILL)
        _wait_gone(alive, time.monotonic() + timeout_s)
    return len(alive)
