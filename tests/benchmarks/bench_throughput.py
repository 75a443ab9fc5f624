"""Scheduler throughput, dispatch latency and producer cycle time, beside PGQueuer.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python -m tests.benchmarks.bench_throughput [--jobs 20000] [--hosts 10]
        [--consumer-wakeup listen|poll] [--tracing off|on|both [--rounds N]]

``--tracing``: the end-to-end run alone, with the fleet's tracing off, on (its spans sent to an
OTLP/HTTP receiver in this process), or both side by side, ``--rounds`` times each, alternating.

Figures only: nothing here passes or fails on time. Every phase runs in one process on the same
PostgreSQL, so the ratios printed compare like with like on this (noisy, shared) machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import libpq_url, make_engine
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.settings import load_settings
from scrapefleet.common.status.document import write_status
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.producer.probes.local_probe import LocalProbe
from scrapefleet.producer.producer_daemon import Producer
from tests.benchmarks.cpu_use import CpuMeter, describe, per_job_ms, postgres_processes, these
from tests.host_status_factory import status_for
from tests.throwaway_db import throwaway_database

FLEET_ENV = {
    "SCRAPEFLEET_LOG_LEVEL": "WARNING",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.5",
    "SCRAPEFLEET_HEARTBEAT_S": "2",
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "1",
}


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar_one()


def _wait(engine: Engine, sql: str, until: int, timeout_s: float, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while int(_scalar(engine, sql)) < until:
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark stuck: {sql} < {until} after {timeout_s} s")
        time.sleep(every_s)


def _submit(engine: Engine, count: int) -> None:
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop")] * count, default_max_attempts=3)


def end_to_end(
    url: str, jobs: int, hosts: int, env: dict[str, str] | None = None
) -> dict[str, float]:
    """Producer + consumer hosts as real processes; jobs submitted at once, then paced."""
    engine = make_engine(url)
    names = [f"bench-{i:02d}" for i in range(hosts)]
    with engine.begin() as conn:
        # What an earlier phase left (the idle fleet's jobs and hosts) would count: its jobs'
        # creation times in the span, its hosts' heartbeats as this fleet's readiness.
        conn.execute(sa.text("TRUNCATE jobs, job_events, hosts CASCADE"))
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=6))
    state = Path(tempfile.mkdtemp(prefix="scrapefleet-bench-"))
    fleet = LocalFleet(url, state, names, env=FLEET_ENV if env is None else env)
    try:
        fleet.start()
        # Every consumer registered and idle before the clock starts.
        _wait(engine, "SELECT count(*) FROM hosts WHERE heartbeat_at IS NOT NULL", hosts, 60)
        time.sleep(1.0)  # let the producer's first probe round see them

        _submit(engine, jobs)
        # PGQueuer's clock starts once its queue is filled; so does this one (the database's
        # clock, like finished_at). The span from the submit's start is printed too.
        queue_filled = _scalar(engine, "SELECT clock_timestamp()")
        meter = CpuMeter(
            {
                "consumers": these(fleet_processes(fleet, [f"consumer-{n}" for n in names])),
                "producer": these(fleet_processes(fleet, ["producer"])),
                "PostgreSQL": postgres_processes(engine),
            }
        )
        meter.start()
        done = "SELECT count(*) FROM jobs WHERE status = 'completed'"
        # The span is read off the database's clock (to the last finished), so how often this
        # looks does not change it; looking every 50 ms cost PostgreSQL ~8% of a core, a
        # load PGQueuer's run does not carry.
        _wait(engine, done, jobs, 600, every_s=0.5)
        cpu = per_job_ms(meter.stop(), jobs)
        with engine.connect() as conn:
            drained_s, with_submit_s = conn.execute(
                sa.text(
                    "SELECT extract(epoch FROM max(finished_at) - :filled),"
                    " extract(epoch FROM max(finished_at) - min(created_at)) FROM jobs"
                ),
                {"filled": queue_filled},
            ).one()
        # Dispatch latency under an offered load well below capacity: 5 jobs every 25 ms.
        with engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE jobs, job_events"))
        paced = 2000
        started = time.monotonic()
        for batch in range(paced // 5):
            _submit(engine, 5)
            sleep = started + (batch + 1) * 0.025 - time.monotonic()
            if sleep > 0:
                time.sleep(sleep)
        _wait(engine, done, paced, 120)
        with engine.connect() as conn:
            p50, p99 = conn.execute(
                sa.text(
                    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
                    " percentile_cont(0.99) WITHIN GROUP (ORDER BY d)"
                    " FROM (SELECT extract(epoch FROM started_at - created_at) AS d FROM jobs) s"
                )
            ).one()
    finally:
        fleet.stop()
        engine.dispose()
    return {
        **{f"cpu_ms_per_job_{name}": ms for name, ms in cpu.items()},
        "jobs_per_s": jobs / float(drained_s),
        "jobs_per_s_with_submit": jobs / float(with_submit_s),
        "dispatch_p50_ms": float(p50) * 1000,
        "dispatch_p99_ms": float(p99) * 1000,
        "paced_offered_jobs_per_s": 200.0,
    }


def fleet_processes(fleet: LocalFleet, names: list[str]) -> list[psutil.Process]:
    """The named daemons of ``fleet`` and whatever they started."""
    processes = []
    for name in names:
        daemon = psutil.Process(fleet.processes[name].pid)
        processes += [daemon, *daemon.children(recursive=True)]
    return processes


def idle_dispatch(url: str, jobs: int = 100, hosts: int = 2) -> dict[str, float]:
    """Dispatch latency on an idle fleet: one job submitted at a time, the next only once the
    last has started, so each one meets a producer and consumers with nothing else to do (what
    a user submitting by hand sees). Latency = started_at - created_at, both the database's."""
    engine = make_engine(url)
    names = [f"idle-{i:02d}" for i in range(hosts)]
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, job_events, hosts CASCADE"))
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=6))
    state = Path(tempfile.mkdtemp(prefix="scrapefleet-bench-idle-"))
    fleet = LocalFleet(url, state, names, env=FLEET_ENV)
    started_sql = "SELECT count(*) FROM jobs WHERE started_at IS NOT NULL"
    try:
        fleet.start()
        _wait(engine, "SELECT count(*) FROM hosts WHERE heartbeat_at IS NOT NULL", hosts, 60)
        time.sleep(1.5)  # past the producer's first probe round and cycle: idle from here
        for index in range(jobs):
            _submit(engine, 1)
            _wait(engine, started_sql, index + 1, 30)
            time.sleep(0.05)  # the fleet goes idle again before the next submit
        with engine.connect() as conn:
            p50, p99 = conn.execute(
                sa.text(
                    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
                    " percentile_cont(0.99) WITHIN GROUP (ORDER BY d)"
                    " FROM (SELECT extract(epoch FROM started_at - created_at) AS d FROM jobs) s"
                )
            ).one()
    finally:
        fleet.stop()
        engine.dispose()
    return {"idle_dispatch_p50_ms": float(p50) * 1000, "idle_dispatch_p99_ms": float(p99) * 1000}


def cycle_time(url: str, history_rows: int, hosts: int = 10, cycles: int = 40) -> float:
    """Median full producer cycle (probe, health, rescue, assign 60 jobs) over a table holding
    ``history_rows`` finished jobs and 1,000 pending ones."""
    engine = make_engine(url)
    state = Path(tempfile.mkdtemp(prefix="scrapefleet-cycle-"))
    names = [f"cyc-{i:02d}" for i in range(hosts)]
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, job_events, hosts, host_events"))
        conn.execute(sa.text("ALTER TABLE jobs DISABLE TRIGGER USER"))
        conn.execute(
            sa.text(
                "INSERT INTO jobs (kind, status, host, finished_at, attempts)"
                " SELECT 'noop', 'completed', 'cyc-0' || (n % 10), now(), 1"
                " FROM generate_series(1, :n) AS n"
            ),
            {"n": history_rows},
        )
        conn.execute(sa.text("ALTER TABLE jobs ENABLE TRIGGER USER"))
        store.insert_jobs(conn, [NewJob("noop")] * 1000, default_max_attempts=3)
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=6))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE jobs"))
    settings = load_settings(database_url=url, state_dir=state, log_level="WARNING")
    producer = Producer(settings, engine, LocalProbe(state, stale_after_s=3600))
    durations = []
    try:
        for _ in range(cycles):
            for name in names:
                write_status(state, status_for(name))
            report = producer.run_cycle(full=True)
            assert report.assigned == hosts * 6, report
            durations.append(report.duration_s)
            with engine.begin() as conn:  # untimed: give the jobs back for the next cycle
                conn.execute(
                    sa.text(
                        "UPDATE jobs SET status = 'pending', host = NULL WHERE status = 'queued'"
                    )
                )
    finally:
        producer.close()
        engine.dispose()
    return statistics.median(durations) * 1000


def pgqueuer(url: str, jobs: int, concurrency: int = 60) -> dict[str, float]:
    """PGQueuer 0.x/1.x with the psycopg driver: one QueueManager, ``concurrency`` no-op jobs
    at a time, drained; its jobs/s and CPU per job (its process, PostgreSQL's)."""
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    engine = make_engine(url)
    meter = CpuMeter(
        {"PGQueuer": these([psutil.Process()]), "PostgreSQL": postgres_processes(engine)}
    )
    engine.dispose()

    async def run() -> dict[str, float]:
        conn = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
        try:
            queries = Queries(PsycopgDriver(conn))
            await queries.install()
            await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
            manager = QueueManager(queries)
            done = 0

            @manager.entrypoint("noop")
            async def noop(job: object) -> None:
                nonlocal done
                done += 1

            started = time.perf_counter()
            meter.start()
            await manager.run(
                mode=QueueExecutionMode.drain,
                batch_size=concurrency // 2,
                max_concurrent_tasks=concurrency,
                dequeue_timeout=timedelta(seconds=1),
            )
            elapsed = time.perf_counter() - started
            cpu = per_job_ms(meter.stop(), jobs)
            assert done == jobs, f"PGQueuer ran {done} of {jobs}"
            return {
                "pgqueuer_jobs_per_s": jobs / elapsed,
                **{f"pgqueuer_cpu_ms_per_job_{name}": ms for name, ms in cpu.items()},
            }
        finally:
            await conn.close()

    return asyncio.run(run())


def _prefixed(figures: dict[str, float], prefix: str) -> dict[str, float]:
    return {
        name[len(prefix) :]: value for name, value in figures.items() if name.startswith(prefix)
    }


def _throughput_and_cycles(url: str, args: argparse.Namespace, figures: dict[str, float]) -> None:
    print(f"end to end: {args.jobs} noop jobs, {args.hosts} consumer hosts of capacity 6 ...")
    figures.update(end_to_end(url, args.jobs, args.hosts))
    print(
        f"  scrapefleet: {figures['jobs_per_s']:.0f} jobs/s from the queue filled"
        f" ({figures['jobs_per_s_with_submit']:.0f} from the submit's start); dispatch at"
        " 200 jobs/s offered:"
        f" p50 {figures['dispatch_p50_ms']:.1f} ms, p99 {figures['dispatch_p99_ms']:.1f} ms"
    )
    print("  " + describe(_prefixed(figures, "cpu_ms_per_job_")))
    print(f"PGQueuer (psycopg driver), {args.jobs} no-op jobs, 60 concurrent ...")
    figures.update(pgqueuer(url, args.jobs))
    figures["ratio_to_pgqueuer"] = figures["jobs_per_s"] / figures["pgqueuer_jobs_per_s"]
    print(
        f"  PGQueuer: {figures['pgqueuer_jobs_per_s']:.0f} jobs/s;"
        f" scrapefleet / PGQueuer = {figures['ratio_to_pgqueuer']:.2f}"
    )
    print("  " + describe(_prefixed(figures, "pgqueuer_cpu_ms_per_job_")))
    print("producer cycle (probe 10 hosts, health, rescue, assign 60) ...")
    figures["cycle_ms_10k"] = cycle_time(url, 10_000 - 1000)
    figures["cycle_ms_1m"] = cycle_time(url, args.big_table - 1000)
    figures["cycle_ratio"] = figures["cycle_ms_1m"] / figures["cycle_ms_10k"]
    print(
        f"  median cycle: {figures['cycle_ms_10k']:.1f} ms at 10k rows,"
        f" {figures['cycle_ms_1m']:.1f} ms at {args.big_table:,} rows"
        f" (ratio {figures['cycle_ratio']:.2f})"
    )


def tracing_side_by_side(url: str, args: argparse.Namespace, figures: dict[str, float]) -> None:
    """The end-to-end run with the fleet's tracing off and on, alternating, ``rounds`` each."""
    modes = ["off", "on"] if args.tracing == "both" else [args.tracing]
    for round_ in range(1, args.rounds + 1):
        for mode in modes:
            print(f"end to end, tracing {mode} (round {round_}): {args.jobs} noop jobs ...")
            with contextlib.ExitStack() as held:
                env = dict(FLEET_ENV)
                receiver = None
                if mode == "on":  # imported only here: a run without it needs no SDK
                    from tests.otlp_receiver import serving

                    receiver = held.enter_context(serving())
                    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.url
                got = end_to_end(url, args.jobs, args.hosts, env)
            key = f"tracing_{mode}_{round_}"
            figures.update({f"{key}_{name}": value for name, value in got.items()})
            spans = f"; {len(receiver.spans)} spans received" if receiver is not None else ""
            print(
                f"  {got['jobs_per_s']:.0f} jobs/s from the queue filled"
                f" ({got['jobs_per_s_with_submit']:.0f} from the submit's start); dispatch p50"
                f" {got['dispatch_p50_ms']:.1f} ms, p99 {got['dispatch_p99_ms']:.1f} ms{spans}"
            )
            print("  " + describe(_prefixed(got, "cpu_ms_per_job_")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--big-table", type=int, default=1_000_000)
    parser.add_argument("--idle-jobs", type=int, default=100)
    parser.add_argument(
        "--idle-only", action="store_true", help="only the idle-fleet dispatch latency"
    )
    parser.add_argument(
        "--consumer-wakeup",
        choices=["listen", "poll"],
        default="listen",
        help="the consumers' consumer_wakeup setting (poll: no LISTEN connection)",
    )
    parser.add_argument(
        "--tracing",
        choices=["off", "on", "both"],
        help="only the end-to-end run, the fleet's OpenTelemetry tracing off, on, or both",
    )
    parser.add_argument("--rounds", type=int, default=1, help="with --tracing: runs of each")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    FLEET_ENV["SCRAPEFLEET_CONSUMER_WAKEUP"] = args.consumer_wakeup
    figures: dict[str, float] = {}
    with throwaway_database("SCRAPEFLEET_BENCH_DATABASE_URL", "scrapefleet_bench") as url:
        if args.tracing is not None:
            tracing_side_by_side(url, args, figures)
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
            return
        print(f"idle fleet: {args.idle_jobs} noop jobs submitted one at a time, 2 hosts ...")
        figures.update(idle_dispatch(url, args.idle_jobs))
        print(
            f"  dispatch on an idle fleet: p50 {figures['idle_dispatch_p50_ms']:.1f} ms,"
            f" p99 {figures['idle_dispatch_p99_ms']:.1f} ms"
        )
        if not args.idle_only:
            _throughput_and_cycles(url, args, figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
