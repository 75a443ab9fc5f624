"""What a proxy pool adds to the producer's assignment: one wake cycle assigning every pending
job, plain ``http_get`` jobs against the same jobs of a pool (leased, a lease row each).

    .venv/bin/python -m tests.benchmarks.bench_proxy_pools [--jobs 600] [--proxies 50]
        [--rounds 7]

Needs PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL, else 127.0.0.1:5432, else an embedded
pgserver), in a database of its own, dropped at the end. Hosts with room for every job; a
pool whose per-proxy cap lets every job in. The two kinds alternate, twice, so that a load that
changes meanwhile shows as a difference between the pairs. Prints the median and the minimum
of each; never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.api import validate_job
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.identities.proxy_pools import parse_proxy
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import (
    add_hosts,
    producer_settings,
    publish_status,
    submit,
)
from tests.throwaway_db import throwaway_database

HOST_CAPACITY = 64  # a host's most (hosts_capacity_valid): as many hosts as the jobs need
RESET_SQL = sa.text(
    "TRUNCATE jobs, hosts, job_events, proxy_pools, proxies, proxy_credentials,"
    " identity_leases, proxy_sessions, proxy_session_jars, producers RESTART IDENTITY"
)


def one_cycle(url: str, engine: Engine, jobs: int, proxies: int | None) -> float:
    """Seconds of the wake cycle that assigns ``jobs`` fresh jobs (of a pool of ``proxies``)."""
    state = Path(tempfile.mkdtemp(prefix="bench-proxy-pools-"))
    with engine.begin() as conn:
        conn.execute(RESET_SQL)
    hosts = [f"h{n}" for n in range(-(-jobs // HOST_CAPACITY))]
    add_hosts(engine, dict.fromkeys(hosts, HOST_CAPACITY))
    for host in hosts:
        publish_status(state, host)
    payload = {"url": "http://a.test/"}
    if proxies is not None:
        urls = [f"http://u:p@10.0.{n // 250}.{n % 250}:8080" for n in range(proxies)]
        with engine.begin() as conn:
            store.add_proxies(conn, "res", [parse_proxy(u) for u in urls])
            store.set_pool(conn, "res", {"max_jobs_per_proxy": 1000})
        payload["proxy_pool"] = "res"
    producer = Producer(producer_settings(url, state), engine)
    try:
        producer.run_cycle()  # the lead taken, the hosts probed
        submit(engine, [validate_job({"kind": "http_get", "payload": payload})] * jobs)
        started = time.perf_counter()
        report = producer.run_cycle(full=False)
        elapsed = time.perf_counter() - started
    finally:
        producer.stop()
    if report.assigned != jobs:
        raise RuntimeError(f"assigned {report.assigned} of {jobs}: {report}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--proxies", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "bench_proxy_pools") as url:
        engine = make_engine(url, pool_size=4)
        try:
            for proxies in (None, args.proxies, None, args.proxies):
                times = [one_cycle(url, engine, args.jobs, proxies) for _ in range(args.rounds)]
                what = "plain jobs" if proxies is None else f"a pool of {proxies} proxies"
                print(
                    f"{args.jobs} jobs, {what}: median {statistics.median(times) * 1000:.1f} ms,"
                    f" min {min(times) * 1000:.1f} ms ({args.rounds} cycles)",
                    flush=True,
                )
        finally:
            engine.dispose()


if __name__ == "__main__":
    main()
