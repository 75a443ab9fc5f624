"""SSH probe rounds over many hosts: what each answer costs a consumer host, and the round.

    .venv/bin/python -m tests.benchmarks.bench_ssh_probe [--hosts 20] [--rounds 10]
        [--workers 16] [--answers old,new,cat] [--fresh]

Builds the hosts with tests/fleet/harness.py (network namespaces, else 127.0.0.1 ports), each
sshd with the producer's key forced to one answer (authorized_keys ``command=``, no wrapper):

- old: ``scrapefleet-consumer status --json --host NAME`` (a Python start per probe),
- new: the product's answer, common.status.answer (``date +%s && exec cat status.json``),
- cat: ``exec cat status.json`` alone (what the clock line costs, for comparison).

For each answer, over kept-open transports (and, with ``--fresh``, connecting afresh every
round): the round's wall time (p50, mean, max), the CPU per probe on the consumer hosts (each
sshd with every session and command it ran, reaped ones included: tests/benchmarks/cpu_use.py)
and the producer's CPU per round (this process: paramiko and the probe's threads). The login
shell of the harness's user (root: bash) runs each forced command; a deployed service user's is
/bin/sh (dash), a little cheaper. Prints figures; never passes or fails.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from scrapefleet.common.status.answer import status_answer_command
from scrapefleet.common.status.document import HostStatus, status_path, write_status
from scrapefleet.producer.probes.ssh_probe import SSHProbe
from tests.benchmarks.cpu_use import tree_cpu_s
from tests.fleet.harness import Fleet, FleetHost
from tests.host_status_factory import status_for
from tests.waiting import wait_for

CONSUMER_BIN = Path(sys.executable).parent / "scrapefleet-consumer"
# The benchmark writes each document once: its age must never fail a probe, whatever the host
# or the producer judges it by.
NEVER_STALE_S = 86_400.0
# A Python start per probe on two loaded cores: an old round of 20 hosts took seconds.
ROUND_TIMEOUT_S = 120.0


def _state_dir(host: FleetHost) -> Path:
    return host.dir / "state"


def _old(host: FleetHost) -> str:
    return (
        f"SCRAPEFLEET_STATE_DIR={_state_dir(host)} SCRAPEFLEET_LOCAL_STATE_STALE_S={NEVER_STALE_S}"
        f" exec {CONSUMER_BIN} status --json --host {host.name}"
    )


def _new(host: FleetHost) -> str:
    return status_answer_command(status_path(_state_dir(host), host.name))


def _cat(host: FleetHost) -> str:
    return f"exec cat {status_path(_state_dir(host), host.name)}"


ANSWERS: dict[str, Callable[[FleetHost], str]] = {"old": _old, "new": _new, "cat": _cat}


@dataclass(frozen=True)
class Figures:
    label: str
    rounds_s: list[float]
    host_cpu_ms_per_probe: float
    producer_cpu_ms_per_round: float

    def line(self) -> str:
        p50, mean, top = (
            statistics.median(self.rounds_s),
            statistics.fmean(self.rounds_s),
            max(self.rounds_s),
        )
        return (
            f"{self.label:<20} {p50 * 1000:9.1f} {mean * 1000:9.1f} {top * 1000:9.1f}"
            f" {self.host_cpu_ms_per_probe:12.2f} {self.producer_cpu_ms_per_round:14.1f}"
        )


HEADER = (
    f"{'answer / transport':<20} {'p50 ms':>9} {'mean ms':>9} {'max ms':>9}"
    f" {'host CPU ms':>12} {'producer CPU':>14}\n"
    f"{'':<20} {'(round)':>9} {'(round)':>9} {'(round)':>9} {'per probe':>12} {'ms per round':>14}"
)


def _sshd(host: FleetHost) -> psutil.Process:
    pid = host.sshd_pid
    if pid is None:
        raise SystemExit(f"sshd of {host.name} is not running")
    return psutil.Process(pid)


def _settled(host: FleetHost) -> bool:
    """Every command the sessions ran has exited and been reaped: only sshd processes left."""
    try:
        return all(
            p.name().startswith("sshd") and p.status() != psutil.STATUS_ZOMBIE
            for p in _sshd(host).children(recursive=True)
        )
    except psutil.NoSuchProcess:
        return False


def _hosts_cpu_s(fleet: Fleet) -> float:
    for host in fleet.hosts.values():
        wait_for(functools.partial(_settled, host), 30, f"{host.name}'s sessions ended")
    return sum(tree_cpu_s(_sshd(host)) for host in fleet.hosts.values())


def measure(fleet: Fleet, answer: str, rounds: int, workers: int, fresh: bool) -> Figures:
    for host in fleet.hosts.values():
        host.authorize(fleet.client_public_key, command=ANSWERS[answer](host))
    targets = fleet.targets()
    probe = SSHProbe(
        timeout_s=ROUND_TIMEOUT_S, max_workers=workers, fresh=fresh, stale_after_s=NEVER_STALE_S
    )
    try:
        _check(probe.probe_all(targets))  # warm-up: first connects, thread pool start
        times, producer_cpu = [], 0.0
        hosts_before = _hosts_cpu_s(fleet)
        for _ in range(rounds):
            started, cpu_started = time.perf_counter(), time.process_time()
            results = probe.probe_all(targets)
            times.append(time.perf_counter() - started)
            producer_cpu += time.process_time() - cpu_started
            _check(results)
        hosts_used = _hosts_cpu_s(fleet) - hosts_before
    finally:
        probe.close()
    label = f"{answer} / {'fresh' if fresh else 'kept-open'}"
    probes = rounds * len(targets)
    return Figures(label, times, hosts_used * 1000 / probes, producer_cpu * 1000 / rounds)


def _check(results: Mapping[str, HostStatus | Exception]) -> None:
    failed = {n: str(r) for n, r in results.items() if not isinstance(r, HostStatus)}
    if failed:
        raise SystemExit(f"probe failures during the benchmark: {failed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=16, help="probe thread pool size")
    parser.add_argument("--answers", default="old,new,cat", help=f"of {', '.join(ANSWERS)}")
    parser.add_argument("--fresh", action="store_true", help="also connect afresh each round")
    args = parser.parse_args()
    answers = [a for a in args.answers.split(",") if a]
    if unknown := set(answers) - set(ANSWERS):
        parser.error(f"--answers: unknown {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    with Fleet() as fleet:
        fleet.add_hosts(args.hosts)
        for host in fleet.hosts.values():
            write_status(_state_dir(host), status_for(host.name))
        print(
            f"{args.hosts} sshd ({fleet.mode} mode) ready in {time.perf_counter() - started:.1f} s;"
            f" {args.rounds} rounds, {args.workers} probe workers"
        )
        print(HEADER)
        for answer in answers:
            for fresh in (False, True) if args.fresh else (False,):
                print(measure(fleet, answer, args.rounds, args.workers, fresh).line(), flush=True)


if __name__ == "__main__":
    main()
