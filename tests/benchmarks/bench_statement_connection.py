"""The client's CPU for one claim: through the engine's pool, against a held psycopg connection.

    .venv/bin/python -m tests.benchmarks.bench_statement_connection [--calls 3000]

A claim that finds nothing queued (the statement still runs in full: its counters and the
``more`` flag); three rounds alternating the two ways, CPU and wall time per call printed.
Figures only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec
from tests.throwaway_db import throwaway_database

HOST = "bench-h1"


def per_call_us(calls: int, claim: Callable[[], object]) -> tuple[float, float]:
    claim()  # connected, and the statement prepared, before the clock
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        claim()
    return (
        1e6 * (time.process_time() - cpu) / calls,
        1e6 * (time.perf_counter() - wall) / calls,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    with throwaway_database("SCRAPEFLEET_BENCH_DATABASE_URL", "scrapefleet_bench") as url:
        engine = make_engine(url)
        with engine.begin() as conn:
            store.add_host(conn, HostSpec(name=HOST, capacity=6))
        held = StatementConnection(url, load_settings(None), "bench held")

        def pooled() -> object:
            with engine.connect() as conn:  # as the consumer claimed before: autocommit
                autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
                return store.claim_jobs(autocommit, HOST, 6)

        def kept() -> object:
            return store.claim_jobs(held, HOST, 6)

        try:
            for round_ in range(1, 4):
                for name, claim in (("engine pool", pooled), ("held connection", kept)):
                    cpu, wall = per_call_us(args.calls, claim)
                    print(f"round {round_}, {name}: {cpu:.0f} us CPU, {wall:.0f} us wall a claim")
        finally:
            held.close()
            engine.dispose()


if __name__ == "__main__":
    main()
