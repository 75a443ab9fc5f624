"""The real producer against 10, 100 and 1,000 simulated hosts and 1,000,000 pending jobs.

    .venv/bin/python -m tests.benchmarks.bench_fleet_scale [--jobs 1000000] [--hosts 10,100,1000]
        [--seconds 20] [--sim-processes 2]

The producer is the real one (``Producer.run_cycle``, the real store, the local probe reading
status files) in this process: a full cycle every ``producer_interval_s`` and, between them,
assign-only wake cycles as a busy fleet's finish NOTIFYs would trigger. The hosts are simulated
in a few other processes, many hosts each: every pass a host claims its queued jobs, completes
the ones it claimed the pass before (instant no-op jobs) through the real store functions,
heartbeats every ``heartbeat_s``, and rewrites its status file as a consumer does. Figures
only: nothing here passes or fails on time. The machine's load average is printed beside them.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.settings import load_settings
from scrapefleet.common.status.document import HostStatus, write_status
from scrapefleet.common.store import HostSpec
from scrapefleet.producer.probes.local_probe import HostTarget, LocalProbe
from scrapefleet.producer.producer_daemon import Producer
from tests.host_status_factory import status_for
from tests.throwaway_db import throwaway_database

CAPACITY = 6
SIM_APP = "bench-sim-consumer"
PRODUCER_APP = "bench-producer"
# Its engine's pool, and its leader session (which runs the cycles' transactions).
PRODUCER_APPS = (PRODUCER_APP, "scrapefleet-producer")
STATUS_EVERY_S = 1.0  # a simulated host rewrites its status file at least this often
WAKE_EVERY_S = 0.05  # between full cycles: an assign-only cycle, as finish NOTIFYs would wake


class TimedProbe:
    """The local probe, with the duration of each round kept."""

    def __init__(self, probe: LocalProbe) -> None:
        self._probe = probe
        self.rounds_s: list[float] = []

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        started = time.perf_counter()
        try:
            return self._probe.probe_all(targets)
        finally:
            self.rounds_s.append(time.perf_counter() - started)

    def close(self) -> None:
        self._probe.close()


def _fill(engine: Engine, jobs: int, hosts: list[str]) -> None:
    """``jobs`` pending no-op jobs (generate_series, triggers off: no NOTIFY per row) and the
    hosts, on empty tables."""
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, job_events, hosts, host_events RESTART IDENTITY"))
        conn.execute(sa.text("ALTER TABLE jobs DISABLE TRIGGER USER"))
        conn.execute(
            sa.text("INSERT INTO jobs (kind) SELECT 'noop' FROM generate_series(1, :n)"),
            {"n": jobs},
        )
        conn.execute(sa.text("ALTER TABLE jobs ENABLE TRIGGER USER"))
        for name in hosts:
            store.add_host(conn, HostSpec(name=name, capacity=CAPACITY))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE jobs"))


def simulate_hosts(
    url: str, state: str, hosts: list[str], heartbeat_s: float, stop: Event, counters: Any
) -> None:
    """One process, many hosts: claim, complete, heartbeat and report through the real store.
    ``counters``: [processes through their first pass, jobs completed]."""
    engine = make_engine(url, pool_size=1, application_name=SIM_APP)
    state_dir = Path(state)
    claimed: dict[str, list[tuple[int, int]]] = {name: [] for name in hosts}
    written: dict[str, float] = dict.fromkeys(hosts, 0.0)
    beat: dict[str, float] = dict.fromkeys(hosts, 0.0)
    completed = 0
    first_pass = True
    try:
        while not stop.is_set():
            for name in hosts:
                now = time.monotonic()
                with engine.begin() as conn:
                    finished = claimed[name]
                    if finished:
                        empty: dict[str, Any] = {}
                        results = [(job_id, attempt, empty) for job_id, attempt in finished]
                        completed += len(store.complete_jobs(conn, name, results))
                    claim = store.claim_jobs(conn, name, CAPACITY)
                    if now - beat[name] >= heartbeat_s:
                        store.heartbeat(conn, name, [j.key for j in claim.jobs])
                        beat[name] = now
                changed = len(claim.jobs) != len(finished)
                claimed[name] = [(j.id, j.claim) for j in claim.jobs]
                if changed or now - written[name] >= STATUS_EVERY_S:
                    write_status(state_dir, status_for(name, running=len(claimed[name])))
                    written[name] = now
            if first_pass:
                first_pass = False
                with counters.get_lock():
                    counters[0] += 1
    finally:
        engine.dispose()
        with counters.get_lock():
            counters[1] += completed


@dataclass
class SizeFigures:
    hosts: int
    cycle_ms_median: float
    cycle_ms_max: float
    over_interval: int
    full_cycles: int
    wake_ms_median: float
    probe_ms_median: float
    assigned_per_s: float
    completed_per_s: float
    connections: dict[str, int]
    cpu_percent: float
    rss_mb: float


def _wait_ready(producer: Producer, counters: Any, processes: int) -> None:
    """Every simulator through one pass over its hosts (connected, status files fresh),
    the producer leading, before the clock starts."""
    deadline = time.monotonic() + 300
    while counters[0] < processes:
        if time.monotonic() > deadline:
            raise SystemExit("the host simulators did not start within 300 s")
        producer.run_cycle(full=True)
        time.sleep(0.2)


def _connections(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT application_name, count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() GROUP BY application_name"
            )
        ).all()
    return {name or "(none)": count for name, count in rows}


def measure(url: str, hosts: int, jobs: int, seconds: float, sim_processes: int) -> SizeFigures:
    names = [f"sim-{i:04d}" for i in range(hosts)]
    admin = make_engine(url, pool_size=1, application_name="bench-admin")
    _fill(admin, jobs, names)
    state = Path(tempfile.mkdtemp(prefix="scrapefleet-scale-"))
    for name in names:
        write_status(state, status_for(name))
    settings = load_settings(database_url=url, state_dir=state, log_level="WARNING")
    engine = make_engine(url, application_name=PRODUCER_APP, settings=settings)
    probe = TimedProbe(LocalProbe(state, settings.local_state_stale_s))
    producer = Producer(settings, engine, probe)
    spawn = mp.get_context("spawn")
    stop = spawn.Event()
    counters = spawn.Array("q", [0, 0])
    groups = [names[i::sim_processes] for i in range(sim_processes)]
    sims = [
        spawn.Process(
            target=simulate_hosts,
            args=(url, str(state), group, settings.heartbeat_s, stop, counters),
        )
        for group in groups
        if group
    ]
    for sim in sims:
        sim.start()
    _wait_ready(producer, counters, len(sims))
    me = psutil.Process()
    full_s: list[float] = []
    wake_s: list[float] = []
    assigned = 0
    peak_rss = 0
    connections: dict[str, int] = {}
    interval = settings.producer_interval_s
    try:
        cpu_before = me.cpu_times()
        started = time.monotonic()
        next_full = started
        while time.monotonic() - started < seconds:
            full = time.monotonic() >= next_full
            if full:
                next_full += interval
            report = producer.run_cycle(full=full)
            if report.error:
                raise SystemExit(f"producer cycle failed: {report.error}")
            (full_s if full else wake_s).append(report.duration_s)
            assigned += report.assigned
            peak_rss = max(peak_rss, me.memory_info().rss)
            if full:
                for name, count in _connections(admin).items():
                    connections[name] = max(connections.get(name, 0), count)
            time.sleep(max(0.0, min(WAKE_EVERY_S, next_full - time.monotonic())))
        wall = time.monotonic() - started
        cpu_after = me.cpu_times()
    finally:
        stop.set()
        for sim in sims:
            sim.join(60)
        producer.close()
        engine.dispose()
        admin.dispose()
    cpu = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    return SizeFigures(
        hosts=hosts,
        cycle_ms_median=statistics.median(full_s) * 1000,
        cycle_ms_max=max(full_s) * 1000,
        over_interval=sum(1 for d in full_s if d > interval),
        full_cycles=len(full_s),
        wake_ms_median=statistics.median(wake_s) * 1000 if wake_s else 0.0,
        probe_ms_median=statistics.median(probe.rounds_s) * 1000,
        assigned_per_s=assigned / wall,
        completed_per_s=counters[1] / wall,
        connections=connections,
        cpu_percent=100 * cpu / wall,
        rss_mb=peak_rss / 2**20,
    )


def _table(rows: list[SizeFigures], interval: float) -> str:
    lines = [
        "| hosts | full cycle p50 / max ms | cycles over the interval | wake cycle p50 ms"
        " | probe round p50 ms | assigned/s | completed/s | producer CPU % | producer RSS MB"
        " | DB connections (producer + simulators) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        producer = sum(n for k, n in r.connections.items() if k.startswith(PRODUCER_APPS))
        sims = r.connections.get(SIM_APP, 0)
        lines.append(
            f"| {r.hosts:,} | {r.cycle_ms_median:.1f} / {r.cycle_ms_max:.1f}"
            f" | {r.over_interval} of {r.full_cycles} (interval {interval:g} s)"
            f" | {r.wake_ms_median:.1f} | {r.probe_ms_median:.1f} | {r.assigned_per_s:,.0f}"
            f" | {r.completed_per_s:,.0f} | {r.cpu_percent:.0f} | {r.rss_mb:.0f}"
            f" | {producer} + {sims} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="pending jobs at the start")
    parser.add_argument("--hosts", default="10,100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured run per size")
    parser.add_argument("--sim-processes", type=int, default=2, help="processes simulating hosts")
    args = parser.parse_args()
    sizes = [int(s) for s in args.hosts.split(",")]
    rows = []
    with throwaway_database("SCRAPEFLEET_BENCH_DATABASE_URL", "scrapefleet_scale") as url:
        for hosts in sizes:
            print(f"{hosts:,} hosts, {args.jobs:,} pending jobs, {args.seconds:g} s ...")
            rows.append(measure(url, hosts, args.jobs, args.seconds, args.sim_processes))
            print(f"  {rows[-1]}")
        interval = load_settings(database_url=url).producer_interval_s
    print()
    print(_table(rows, interval))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average (1, 5, 15 min) at the end: {load}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
