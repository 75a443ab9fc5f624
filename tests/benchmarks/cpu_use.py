"""CPU time spent per job by each side of a benchmark run: a finer measure than jobs/s on a
shared 2-core machine, where one run's throughput moves ±8% with the neighbours' load but the
CPU a job costs does not.

A meter reads the CPU time (user + system) of named groups of processes when it starts and
when it stops; a process that exits in between loses what it used since the start (the fleets
measured here keep theirs, and PostgreSQL's backends are pooled connections).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine

Group = Callable[[], Iterable[psutil.Process]]


def postgres_processes(engine: Engine) -> Group:
    """Every process of the server ``engine`` talks to: its postmaster's children (backends,
    WAL writer, checkpointer...). The server must run on this machine."""
    with engine.connect() as conn:
        backend = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    postmaster = psutil.Process(int(backend)).parent()
    if postmaster is None:
        raise SystemExit("cannot measure PostgreSQL's CPU: its postmaster is not visible here")
    return postmaster.children


def these(processes: Iterable[psutil.Process]) -> Group:
    fixed = list(processes)
    return lambda: fixed


def _cpu_s(process: psutil.Process) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:  # exited
        return None
    return float(times.user + times.system)


class CpuMeter:
    def __init__(self, groups: dict[str, Group]) -> None:
        self._groups = groups
        self._start: dict[str, dict[int, float]] = {}

    def _read(self) -> dict[str, dict[int, float]]:
        readings: dict[str, dict[int, float]] = {}
        for name, group in self._groups.items():
            readings[name] = {}
            for process in group():
                used = _cpu_s(process)
                if used is not None:
                    readings[name][process.pid] = used
        return readings

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        """CPU seconds of each group since ``start`` (a process started meanwhile counts all
        of its own)."""
        end = self._read()
        return {
            name: sum(used - self._start[name].get(pid, 0.0) for pid, used in end[name].items())
            for name in self._groups
        }


def tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds used so far by ``root`` and every process it started, including those that
    exited and were reaped (their time is in their parent's children_* times): an sshd and the
    sessions and commands of every connection it served. Read it when no process of the tree is
    exiting, or a just-reaped one may be counted twice."""
    used = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:  # exited between the listing and the reading
            continue
        used += times.user + times.system + times.children_user + times.children_system
    return used


def per_job_ms(used_s: dict[str, float], jobs: int) -> dict[str, float]:
    per_job = {name: seconds * 1000 / jobs for name, seconds in used_s.items()}
    per_job["total"] = sum(per_job.values())
    return per_job


def describe(per_job: dict[str, float]) -> str:
    return ", ".join(f"{name} {ms:.3f}" for name, ms in per_job.items()) + " ms of CPU per job"
