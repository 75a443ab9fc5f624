"""One SSH probe round over many hosts: kept-open Transports vs connecting afresh.

    .venv/bin/python -m tests.benchmarks.bench_ssh_probe [--hosts 50] [--rounds 20] [--workers 16]

Builds the hosts with tests/fleet/harness.py (network namespaces, else 127.0.0.1 ports), each
sshd answering with a forced command that prints a status document (`cat`, so the figures are
SSH's cost, not the real status command's start-up). Prints figures; never passes or fails.
"""

from __future__ import annotations

import argparse
import statistics
import time

from scrapefleet.common.host_status import HostStatus
from scrapefleet.producer.ssh_probe import SSHProbe
from tests.fleet.harness import Fleet


def measure(fleet: Fleet, rounds: int, workers: int, fresh: bool) -> list[float]:
    targets = fleet.targets()
    probe = SSHProbe(max_workers=workers, fresh=fresh)
    try:
        probe.probe_all(targets)  # warm-up: first connects, thread pool start
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            results = probe.probe_all(targets)
            times.append(time.perf_counter() - started)
            failed = {n: r for n, r in results.items() if not isinstance(r, HostStatus)}
            if failed:
                raise SystemExit(f"probe failures during the benchmark: {failed}")
        return times
    finally:
        probe.close()


def report(label: str, times: list[float]) -> float:
    p50 = statistics.median(times)
    print(
        f"{label:<28} p50 {p50 * 1000:7.1f} ms   mean {statistics.fmean(times) * 1000:7.1f} ms"
        f"   max {max(times) * 1000:7.1f} ms"
    )
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=16, help="probe thread pool size")
    args = parser.parse_args()
    started = time.perf_counter()
    with Fleet() as fleet:
        fleet.add_hosts(args.hosts)
        print(
            f"{args.hosts} sshd ({fleet.mode} mode) ready in {time.perf_counter() - started:.1f} s"
        )
        print(f"{args.rounds} rounds, {args.workers} probe workers")
        kept = report("kept-open transports", measure(fleet, args.rounds, args.workers, False))
        fresh = report("connect afresh each round", measure(fleet, args.rounds, args.workers, True))
        print(f"ratio fresh / kept-open (p50): {fresh / kept:.1f}x")


if __name__ == "__main__":
    main()
