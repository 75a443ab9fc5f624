"""`scrapefleet results export` of many finished jobs: rows/s and the CLI's peak memory.

    .venv/bin/python -m tests.benchmarks.bench_export [--rows 1000000] [--format jsonl|csv]

Needs PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL, else 127.0.0.1:5432, else an embedded
pgserver), in a database of its own, dropped at the end. The jobs are written by SQL
(generate_series: each a completed job with a small payload and result); the export runs as
the real CLI in a subprocess, to a file, and its peak RSS is read from the kernel
(getrusage of the child). Also prints the start-up time of `scrapefleet --help` and
`scrapefleet status` (CPU seconds, the median of five). Never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from scrapefleet.common.db.engines import libpq_url
from tests.throwaway_db import throwaway_database

BIN = Path(sys.executable).parent
FILL_SQL = """
INSERT INTO jobs (kind, payload, status, host, attempts, created_at, started_at, finished_at,
                  result)
SELECT 'http_get', jsonb_build_object('url', 'https://example.org/item/' || n),
       'completed', 'h' || (n %% 10), 1, now(), now(), now(),
       jsonb_build_object('status', 200, 'title', 'Item number ' || n, 'length', n %% 9000)
FROM generate_series(1, %(rows)s) AS n
"""


def cli_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    return {**env, "SCRAPEFLEET_DATABASE_URL": url}


def cpu_seconds(args: list[str], env: dict[str, str]) -> float:
    """User + system CPU of one CLI run (a child of ours: getrusage sees it once it ends)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(BIN / "scrapefleet"), *args], env=env, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    args = parser.parse_args()

    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_bench_export") as url:
        started = time.monotonic()
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("ALTER TABLE jobs DISABLE TRIGGER USER")  # no audit rows for a fixture
            conn.execute(FILL_SQL, {"rows": args.rows})
            conn.execute("ALTER TABLE jobs ENABLE TRIGGER USER")
            conn.execute("VACUUM ANALYZE jobs")
        print(f"{args.rows:,} completed jobs written in {time.monotonic() - started:.1f} s")

        env = cli_env(url)
        for command in (["--help"], ["jobs", "retry", "--help"], ["status"]):
            runs = sorted(cpu_seconds(command, env) for _ in range(5))
            print(f"scrapefleet {' '.join(command)}: {statistics.median(runs):.3f} s of CPU")

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / f"results.{args.format}"
            command = ["results", "export", "--format", args.format, "-o", str(out)]
            started = time.monotonic()
            child = subprocess.Popen([str(BIN / "scrapefleet"), *command], env=env)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the others'
            elapsed = time.monotonic() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode:
                raise SystemExit(f"export failed with exit code {child.returncode}")
            size = out.stat().st_size
        print(
            f"export {args.format}: {args.rows:,} rows in {elapsed:.1f} s"
            f" ({args.rows / elapsed:,.0f} rows/s), {size / 1e6:,.0f} MB written,"
            f" peak RSS of the CLI {usage.ru_maxrss / 1024:.0f} MB"
        )


if __name__ == "__main__":
    main()
