"""How many lines a real producer and consumer write at INFO over a run of many jobs.

    .venv/bin/python -m tests.benchmarks.bench_log_lines [--jobs 1000] [--failing 20] [--idle 10]

Needs PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL, else 127.0.0.1:5432, else an embedded
pgserver), in a database of its own, dropped at the end. Starts ``scrapefleet-producer`` (a
0.2 s interval, so a run has many cycles) and one ``scrapefleet-consumer`` as processes, JSON
logs at INFO, submits ``--jobs`` noop jobs and ``--failing`` noop jobs that fail twice (a retry,
then failed for good), waits until every one has finished and ``--idle`` seconds more, stops
both with SIGTERM, then counts their lines by logger and the producer's cycles (from its
metrics endpoint). Attempt lines (``scrapefleet.consumer.jobs``) are one per finished attempt;
nothing else should grow with the jobs or with the producer's cycles.
``tests/integration/test_log_volume.py`` runs the same with a few hundred jobs and asserts it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.store import NewJob
from tests.throwaway_db import throwaway_database

BIN = Path(sys.executable).parent
HOST = "loglines"
ATTEMPT_LOGGER = "scrapefleet.consumer.jobs"


@dataclass
class LogLines:
    """What one process wrote at INFO and above."""

    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("logger") == ATTEMPT_LOGGER]

    @property
    def others(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("logger") != ATTEMPT_LOGGER]

    def by_logger(self) -> Counter[str]:
        return Counter(str(r.get("logger")) for r in self.records)


@dataclass
class Run:
    producer: LogLines
    consumer: LogLines
    jobs: int
    attempts: int  # attempts ended, from the database
    seconds: float
    cycles: dict[str, int]  # the producer's assignment cycles, "full" and "wake"


def read_lines(path: Path) -> LogLines:
    """Every line is a JSON object (log_format = json); a line that is not is kept as text, so
    a stray print is counted, not lost."""
    lines = LogLines()
    for text in path.read_text().splitlines():
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            record = {"logger": "<not json>", "msg": text, "level": "INFO"}
        if not isinstance(record, dict):
            record = {"logger": "<not json>", "msg": text, "level": "INFO"}
        lines.records.append(record)
    return lines


def _env(database_url: str, state_dir: Path) -> dict[str, str]:
    return os.environ | {
        "SCRAPEFLEET_DATABASE_URL": database_url,
        "SCRAPEFLEET_STATE_DIR": str(state_dir),
        "SCRAPEFLEET_LOG_FORMAT": "json",
        "SCRAPEFLEET_LOG_LEVEL": "INFO",
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.2",
        "SCRAPEFLEET_BACKOFF_BASE_S": "0.1",
        "SCRAPEFLEET_BACKOFF_MAX_S": "0.2",
        "SCRAPEFLEET_HEARTBEAT_S": "0.5",
        "SCRAPEFLEET_CONSUMER_POLL_S": "0.2",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def producer_cycles(port: int) -> dict[str, int]:
    """The producer's cycles so far, by kind, from its metrics endpoint."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        sample.labels["cycle"]: int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "scrapefleet_assignment_cycle_duration_seconds_count"
    }


def _finished(database_url: str) -> tuple[int, int]:
    """(jobs not yet finished, attempts ended)."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed')")
            ).scalar_one()
            ended = conn.execute(
                sa.text("SELECT count(*) FROM job_events WHERE from_status = 'processing'")
            ).scalar_one()
        return int(left), int(ended)
    finally:
        engine.dispose()


def run(
    database_url: str,
    work_dir: Path,
    jobs: int,
    failing: int,
    timeout_s: float,
    idle_s: float = 0.0,
) -> Run:
    """Submit the jobs, run a producer and a consumer until every job finished and ``idle_s``
    longer (cycles with nothing to do), stop both."""
    state_dir = work_dir / "state"
    boot_id = work_dir / "boot_id"
    boot_id.write_text("boot-1\n")
    port = _free_port()
    env = _env(database_url, state_dir) | {"SCRAPEFLEET_BOOT_ID_FILE": str(boot_id)}
    producer_env = env | {"SCRAPEFLEET_METRICS_PORT": str(port)}
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            new = [NewJob("noop") for _ in range(jobs)]
            new += [NewJob("noop", {"fail": True}, max_attempts=2) for _ in range(failing)]
            store.insert_jobs(conn, new, default_max_attempts=3)
    finally:
        engine.dispose()
    logs = {name: work_dir / f"{name}.log" for name in ("producer", "consumer")}
    commands = {
        "consumer": [str(BIN / "scrapefleet-consumer"), "run", "--host", HOST, "--register"],
        "producer": [str(BIN / "scrapefleet-producer")],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    started = time.monotonic()
    try:
        for name, command in commands.items():
            with logs[name].open("wb") as out:
                processes[name] = subprocess.Popen(
                    command,
                    env=producer_env if name == "producer" else env,
                    stdout=out,
                    stderr=out,
                )
        deadline = started + timeout_s
        while _finished(database_url)[0]:
            for name, process in processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: {logs[name]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still unfinished after {timeout_s:.0f} s")
            time.sleep(0.2)
        seconds = time.monotonic() - started
        time.sleep(idle_s)
        cycles = producer_cycles(port)
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            process.wait(30)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(5)
    return Run(
        read_lines(logs["producer"]),
        read_lines(logs["consumer"]),
        jobs + failing,
        _finished(database_url)[1],
        seconds,
        cycles,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--failing", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds run idle at the end")
    args = parser.parse_args()
    with (
        throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_bench_logs") as url,
        TemporaryDirectory(prefix="scrapefleet-loglines-") as work,
    ):
        result = run(url, Path(work), args.jobs, args.failing, args.timeout, args.idle)
    print(
        f"{result.jobs} jobs, {result.attempts} attempts ended, in {result.seconds:.1f} s"
        f" (+{args.idle:g} s idle); producer cycles {result.cycles}"
    )
    for name, lines in (("producer", result.producer), ("consumer", result.consumer)):
        levels = Counter(str(r.get("level")) for r in lines.records)
        print(
            f"{name}: {len(lines.records)} lines ({len(lines.attempts)} attempt lines,"
            f" {len(lines.others)} others) by level {dict(levels)}"
        )
        for logger, n in lines.by_logger().most_common():
            print(f"  {n:6d}  {logger}")


if __name__ == "__main__":
    main()
