"""Completions that spawn children: what they cost the consumer's recording transaction.

    .venv/bin/python -m tests.benchmarks.bench_spawn [--parents 500] [--children 100]

Needs PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL, else 127.0.0.1:5432, else an embedded
pgserver), in a database of its own, dropped at the end. A crawl's root spawns ``--parents``
jobs; they are claimed and completed in batches of ``--batch`` (as the recorder does), each
spawning ``--children`` new keys and offering as many keys the crawl has already seen. Prints
the time spent in the completing transactions and, for scale, ``insert_jobs`` (the submit
path, COPY) of as many jobs at the same grain (rows a statement, statements a transaction).
Never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.store import HostSpec, NewJob
from tests.throwaway_db import throwaway_database

HOST = "h1"


def _entry(key: str) -> dict[str, Any]:
    return {"kind": "noop", "payload": {}, "needs_browser": False, "dedupe_key": key}


def _parents(engine: Engine, parents: int) -> list[int]:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name=HOST, capacity=64))
        crawl = store.start_crawl(
            conn, kind="noop", payload={}, max_depth=5, max_jobs=100_000_000, dedupe_key="root"
        )
        store.assign_jobs(conn, [(crawl, HOST)])
        (root,) = store.claim_jobs(conn, HOST, 1).jobs
        store.complete_job(
            conn, HOST, crawl, root.claim, {}, [_entry(f"p{i}") for i in range(parents)]
        )
    with engine.begin() as conn:
        ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM jobs WHERE depth = 1")]
        store.assign_jobs(conn, [(i, HOST) for i in ids])
    return ids


def spawning(engine: Engine, parents: int, children: int, batch: int) -> tuple[float, int]:
    """Seconds in the completing transactions, and the children inserted."""
    ids = _parents(engine, parents)
    spent = 0.0
    for _ in range(0, len(ids), batch):
        with engine.begin() as conn:
            claimed = store.claim_jobs(conn, HOST, batch).jobs
        spawns = {
            job.id: [_entry(f"{job.id}/{k}") for k in range(children)]
            + [_entry(f"p{k}") for k in range(children)]  # seen already: dropped
            for job in claimed
        }
        started = time.perf_counter()
        with engine.begin() as conn:
            store.complete_jobs(conn, HOST, [(j.id, j.claim, {}) for j in claimed], spawns)
        spent += time.perf_counter() - started
    with engine.connect() as conn:
        inserted = conn.exec_driver_sql("SELECT count(*) FROM jobs WHERE depth = 2").scalar_one()
    return spent, int(inserted)


def submitting(engine: Engine, statements: int, rows: int, batch: int) -> float:
    """Seconds for insert_jobs of ``rows`` jobs a statement, ``batch`` statements a
    transaction: the submit path at the same grain as the spawns."""
    jobs = [NewJob("noop", {"n": n}) for n in range(rows)]
    started = time.perf_counter()
    for _ in range(0, statements, batch):
        with engine.begin() as conn:
            for _ in range(batch):
                store.insert_jobs(conn, jobs, default_max_attempts=3)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parents", type=int, default=500)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50, help="completions per transaction")
    args = parser.parse_args()
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_bench_spawn") as url:
        engine = make_engine(url)
        try:
            spent, inserted = spawning(engine, args.parents, args.children, args.batch)
            print(
                f"spawn: {args.parents} completions of {args.children} new + {args.children} seen"
                f" keys: {inserted:,} children in {spent:.2f} s ({inserted / spent:,.0f}/s,"
                f" {spent / args.parents * 1000:.1f} ms per completion)"
            )
            submitted = submitting(engine, args.parents, args.children, args.batch)
            total = args.parents * args.children
            print(
                f"for scale, insert_jobs of {total:,} jobs, {args.children} a statement and"
                f" {args.batch} statements a transaction: {submitted:.2f} s"
                f" ({total / submitted:,.0f}/s)"
            )
        finally:
            engine.dispose()


if __name__ == "__main__":
    main()
