"""What an idle LISTEN connection costs PostgreSQL when NOTIFYs are sent on other channels.

    .venv/bin/python -m tests.benchmarks.bench_listen_fanout [--listeners 0,20,40,80]
        [--notifies 3000]

A consumer host in direct mode holds one LISTEN connection on its own channel
(common.db.channels). PostgreSQL 15 signals every listening backend of the database at every
commit that sent a NOTIFY, whatever the channel: each wakes, reads the notification queue and
finds nothing for it. This measures that cost: for each count of idle listeners (one channel
each, as hosts listen), one connection commits ``--notifies`` NOTIFYs on the producer's channel
(as each batch of completions does), and the server's CPU is read before and after (`psutil`,
every process of the postmaster). Figures only: nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from scrapefleet.common.constants import CHANNEL_FINISHED
from scrapefleet.common.db.channels import host_channels
from scrapefleet.common.db.engines import libpq_url, make_engine
from tests.benchmarks.cpu_use import CpuMeter, postgres_processes
from tests.throwaway_db import throwaway_database


def server_cpu_per_notify(url: str, listeners: int, notifies: int) -> tuple[float, float]:
    """(µs of the server's CPU, µs of wall time) per NOTIFY commit with ``listeners`` idle."""
    conninfo = libpq_url(url)
    listening = [psycopg.connect(conninfo, autocommit=True) for _ in range(listeners)]
    engine = make_engine(url)
    try:
        for index, conn in enumerate(listening):
            (channel,) = host_channels(conn, [f"fanout-{index}"])
            conn.execute(f'LISTEN "{channel}"')
        meter = CpuMeter({"PostgreSQL": postgres_processes(engine)})
        with psycopg.connect(conninfo, autocommit=True) as sender:
            sender.execute("SELECT pg_notify(%s, 'warm-up')", (CHANNEL_FINISHED,))
            meter.start()
            started = time.perf_counter()
            for _ in range(notifies):
                sender.execute("SELECT pg_notify(%s, 'h1')", (CHANNEL_FINISHED,))
            wall_s = time.perf_counter() - started
            # Let the listeners catch up before reading the server's CPU: each answers a
            # statement only once it has read the queue to its head.
            for conn in listening:
                conn.execute("SELECT 1")
            used_s = meter.stop()["PostgreSQL"]
        return used_s * 1e6 / notifies, wall_s * 1e6 / notifies
    finally:
        for conn in listening:
            conn.close()
        engine.dispose()


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(n) for n in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of counts: {text!r}"
        ) from None
    if counts[0] < 0:
        raise argparse.ArgumentTypeError("a listener count cannot be negative")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--listeners", type=_counts, default="0,20,40,80", help="idle listener counts"
    )
    parser.add_argument("--notifies", type=int, default=3000)
    args = parser.parse_args()
    rows = []
    with throwaway_database("SCRAPEFLEET_BENCH_DATABASE_URL", "scrapefleet_fanout") as url:
        with psycopg.connect(libpq_url(url)) as conn:
            (max_connections,) = conn.execute("SHOW max_connections").fetchall()[0]
        room = int(max_connections) - 10  # the sender, this benchmark's own, the server's
        if args.listeners[-1] > room:
            raise SystemExit(f"--listeners: at most {room} on this server (max_connections - 10)")
        for listeners in args.listeners:
            cpu_us, wall_us = server_cpu_per_notify(url, listeners, args.notifies)
            rows.append((listeners, cpu_us, wall_us))
            print(f"{listeners} idle listeners: {cpu_us:.1f} us of server CPU, {wall_us:.1f} us")
    # Each row against the first (the fewest listeners): what one more listener costs.
    base_listeners, base_cpu, _ = rows[0]
    print("\n| idle listeners | server CPU per NOTIFY, us | per added listener, us | wall, us |")
    print("|---|---|---|---|")
    for listeners, cpu_us, wall_us in rows:
        added = listeners - base_listeners
        each = f"{(cpu_us - base_cpu) / added:.1f}" if added else "-"
        print(f"| {listeners} | {cpu_us:.1f} | {each} | {wall_us:.1f} |")


if __name__ == "__main__":
    main()
