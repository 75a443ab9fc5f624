"""Rate limits without collapse: do other keys' jobs finish as fast beside a limited backlog?

    .venv/bin/python -m tests.benchmarks.bench_rate_limits [--limited 5000] [--others 1000]

A producer and consumer hosts as real processes, one key limited to 2 at once and 60 a minute.
Each round submits the other keys' jobs (a noop of a few ms, ten keys) and times them from
submit to the last one's finish, first alone, then behind a backlog of ``--limited`` jobs on
the limited key submitted just before them (older, so ahead in the queue). The ratio of the
two medians is printed, with the producer's pending read with and without the backlog.

Figures only: nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.jobs.rate_limits import PendingSkips
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from tests.throwaway_db import throwaway_database

LIMITED = "limited.bench"
FLEET_ENV = {
    "SCRAPEFLEET_LOG_LEVEL": "WARNING",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.5",
    "SCRAPEFLEET_HEARTBEAT_S": "2",
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "1",
    "SCRAPEFLEET_RATE_LIMITS": json.dumps({LIMITED: {"concurrency": 2, "per_minute": 60}}),
}
JOB_SLEEP_S = 0.005


def _scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def _wait(engine: Engine, sql: str, until: int, timeout_s: float, **params: Any) -> None:
    deadline = time.monotonic() + timeout_s
    while int(_scalar(engine, sql, **params)) < until:
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark stuck: {sql} < {until} after {timeout_s} s")
        time.sleep(0.02)


def _submit(engine: Engine, jobs: list[NewJob]) -> list[int]:
    with engine.begin() as conn:
        return store.insert_jobs(conn, jobs, default_max_attempts=3).ids


def _others(count: int) -> list[NewJob]:
    return [
        NewJob("noop", {"sleep_s": JOB_SLEEP_S}, rate_key=f"site-{i % 10}.bench")
        for i in range(count)
    ]


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM jobs WHERE status = 'pending'"))
    _wait(engine, "SELECT count(*) = 0 FROM jobs WHERE status IN ('queued', 'processing')", 1, 60)
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, job_events, rate_keys"))


def _round(engine: Engine, others: int, backlog: int) -> float:
    """Seconds from the submit of ``others`` jobs to the last one's finish (database clock)."""
    _reset(engine)
    if backlog:
        limited = [NewJob("noop", {"sleep_s": JOB_SLEEP_S}, rate_key=LIMITED)] * backlog
        _submit(engine, limited)
    ids = _submit(engine, _others(others))
    done = "SELECT count(*) FROM jobs WHERE status = 'completed' AND id = ANY(:ids)"
    _wait(engine, done, others, 300, ids=ids)
    return float(
        _scalar(
            engine,
            "SELECT extract(epoch FROM max(finished_at) - min(created_at)) FROM jobs"
            " WHERE id = ANY(:ids)",
            ids=ids,
        )
    )


def _pending_read_ms(engine: Engine, backlog: int, others: int) -> dict[str, float]:
    """The producer's pending read (limit 96: 24 free slots x 4), median of 20, with the limited
    key tight (2 left) and saturated, on ``backlog`` limited jobs ahead of ``others``."""
    _reset(engine)
    _submit(engine, [NewJob("noop", rate_key=LIMITED)] * backlog)
    _submit(engine, _others(others))
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE jobs"))
    figures = {}
    for name, skips in (
        ("tight", PendingSkips(tight_keys={LIMITED: 2})),
        ("saturated", PendingSkips(saturated_keys=(LIMITED,))),
    ):
        times = []
        for _ in range(20):
            with engine.begin() as conn:
                started = time.perf_counter()
                store.lock_pending_within_limits(conn, 96, skips)
                times.append(time.perf_counter() - started)
                conn.rollback()
        figures[name] = statistics.median(times) * 1000
    return figures


def run(url: str, limited: int, others: int, hosts: int, rounds: int) -> dict[str, float]:
    engine = make_engine(url)
    names = [f"bench-{i:02d}" for i in range(hosts)]
    with engine.begin() as conn:
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=6))
    state = Path(tempfile.mkdtemp(prefix="scrapefleet-bench-rate-"))
    fleet = LocalFleet(url, state, names, env=FLEET_ENV)
    alone: list[float] = []
    beside: list[float] = []
    try:
        fleet.start()
        _wait(engine, "SELECT count(*) FROM hosts WHERE heartbeat_at IS NOT NULL", hosts, 60)
        time.sleep(1.5)  # the producer's first probe round sees them all
        _round(engine, others, 0)  # warm-up
        for _ in range(rounds):  # interleaved, so drift on a shared machine hits both alike
            alone.append(_round(engine, others, 0))
            beside.append(_round(engine, others, limited))
        limited_started = int(
            _scalar(
                engine,
                "SELECT count(*) FROM jobs WHERE rate_key = :k AND started_at IS NOT NULL",
                k=LIMITED,
            )
        )
    finally:
        fleet.stop()
    reads = _pending_read_ms(engine, limited, others)
    engine.dispose()
    ratios = sorted(b / a for a, b in zip(alone, beside, strict=True))
    return {
        "others_alone_s": statistics.median(alone),
        "others_beside_backlog_s": statistics.median(beside),
        "ratio": statistics.median(beside) / statistics.median(alone),
        "ratio_round_min": ratios[0],
        "ratio_round_max": ratios[-1],
        "limited_started_last_round": limited_started,
        "pending_read_tight_ms": reads["tight"],
        "pending_read_saturated_ms": reads["saturated"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limited", type=int, default=5000, help="backlog on the limited key")
    parser.add_argument("--others", type=int, default=1000, help="jobs of ten other keys")
    parser.add_argument("--hosts", type=int, default=4, help="consumer hosts of capacity 6")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print(
        f"{args.others} jobs of other keys, alone and behind {args.limited} pending on a key"
        f" limited to 2 at once / 60 a minute; {args.hosts} hosts x 6; median of {args.rounds}"
    )
    with throwaway_database("SCRAPEFLEET_BENCH_DATABASE_URL", "scrapefleet_bench") as url:
        figures = run(url, args.limited, args.others, args.hosts, args.rounds)
    print(f"  others alone:            {figures['others_alone_s']:.2f} s")
    print(f"  others beside backlog:   {figures['others_beside_backlog_s']:.2f} s")
    print(
        f"  ratio:                   {figures['ratio']:.2f}x (of medians; rounds"
        f" {figures['ratio_round_min']:.2f}x to {figures['ratio_round_max']:.2f}x)"
    )
    print(f"  limited key started (last round): {figures['limited_started_last_round']}")
    print(
        f"  pending read, {args.limited} limited ahead: {figures['pending_read_tight_ms']:.2f} ms"
        f" (key with 2 left), {figures['pending_read_saturated_ms']:.2f} ms (key full)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
