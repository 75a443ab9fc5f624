"""200 fetch_page jobs through one consumer host vs a plain loop; browser memory over the run.

    .venv/bin/python -m tests.benchmarks.bench_browser [--jobs 200] [--capacity 6]

Needs the browser stack (.ci/install-browser.sh) and PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL,
else 127.0.0.1:5432, else an embedded pgserver), in a database of its own, dropped at the end.

1. A real Consumer (capacity 6, its own stack) runs the jobs, queued all at once, with restarts
   every 20 jobs and again with restarts off; the PSS of the stack's processes (Xvfb, Grid,
   chromedriver, every Chromium process) is sampled through each run.
2. A plain loop: one browser session fetching the same pages one by one.
Prints jobs/min of both and their ratio, memory after the first 20 jobs vs after the last, and
draws the memory of both modes to docs/browser_memory.png. Never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db import libpq_url, make_engine, sqlalchemy_url
from scrapefleet.common.migrate import upgrade
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser_stack import BrowserStack
from scrapefleet.consumer.daemon import Consumer
from scrapefleet.consumer.selenium_actions import FetchPageParams, fetch_page
from tests.browser.site import LocalSite

HOST = "bench-1"
PLOT = Path(__file__).resolve().parents[2] / "docs" / "browser_memory.png"
SAMPLE_S = 1.0
MB = 1024 * 1024
FIRST_JOBS = 20


@dataclass
class Run:
    label: str
    elapsed_s: float = 0.0
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, done, PSS)

    def pss_at(self, low: int, high: int) -> int:
        """Highest PSS sampled while low < completed jobs <= high."""
        return max((pss for _, done, pss in self.samples if low < done <= high), default=0)


def server_url() -> str:
    url = os.environ.get("SCRAPEFLEET_TEST_DATABASE_URL")
    if url:
        return url
    default = "postgresql://postgres@127.0.0.1:5432/postgres"
    try:
        psycopg.connect(default, connect_timeout=2).close()
        return default
    except psycopg.OperationalError:
        import pgserver

        return str(pgserver.get_server(Path("/tmp/scrapefleet-bench-pg")).get_uri())


def settings_for(database_url: str, work: Path, capacity: int, restart_every: int) -> Settings:
    boot_id = work / "boot_id"
    boot_id.write_text("bench\n")
    return load_settings(
        None,
        database_url=database_url,
        state_dir=work / f"state-{restart_every}",
        artifacts_dir=work / "artifacts",
        boot_id_file=boot_id,
        capacity=capacity,
        restart_every=restart_every,
        reboot_every=0,
        consumer_poll_s=0.2,
        heartbeat_s=1.0,
        job_timeout_s=120.0,
        screen_width_px=1024,
        screen_height_px=700,
    )


def pages(site: LocalSite, count: int) -> list[str]:
    return [site.url(f"/item?n={n}") for n in range(count)]


def run_consumer(engine: Engine, settings: Settings, urls: list[str], label: str) -> Run:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, hosts, job_events, host_events RESTART IDENTITY"))
        jobs = [NewJob("fetch_page", {"url": url}, max_attempts=3) for url in urls]
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, HOST) for i in ids])
    consumer = Consumer(settings, engine, HOST)
    thread = threading.Thread(target=consumer.run, kwargs={"until_idle": True}, daemon=True)
    run = Run(label)
    started = time.monotonic()
    thread.start()
    while thread.is_alive():
        thread.join(SAMPLE_S)
        with engine.begin() as conn:
            # The producer's part: a job released by a stack fault goes back to this host.
            state = conn.execute(sa.text("SELECT state FROM hosts WHERE name = :h"), {"h": HOST})
            if state.scalar() == "active":
                due = store.lock_pending_jobs(conn, 100)
                store.assign_jobs(conn, [(p.id, HOST) for p in due])
        with engine.connect() as conn:
            done = conn.execute(
                sa.text("SELECT count(*) FROM jobs WHERE status IN ('completed', 'failed')")
            ).scalar_one()
        supervisor = consumer.supervisor
        pss = supervisor.stack.memory_pss_bytes() if supervisor and supervisor.running else 0
        run.samples.append((time.monotonic() - started, done, pss))
        print(f"  {label}: {done}/{len(urls)} jobs, stack PSS {pss / MB:.0f} MB", flush=True)
    run.elapsed_s = time.monotonic() - started
    with engine.connect() as conn:
        failed = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE status <> 'completed'")
        ).scalar_one()
    if failed:
        print(f"  {label}: {failed} job(s) did not complete")
    return run


def plain_loop(settings: Settings, work: Path, urls: list[str]) -> float:
    """One browser, one session, the same pages one by one: the floor a fleet is measured on."""
    with BrowserStack(settings, "plain-loop", 1, work / "plain-stack") as stack:
        driver = stack.new_driver()
        try:
            started = time.monotonic()
            for url in urls:
                fetch_page(driver, FetchPageParams(url=url))
            return time.monotonic() - started
        finally:
            driver.quit()


def draw(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in runs:
        ax.plot([s[1] for s in run.samples], [s[2] / MB for s in run.samples], label=run.label)
    ax.set_xlabel("jobs finished")
    ax.set_ylabel("browser stack PSS (MB)")
    ax.set_title("Browser stack memory over 200 fetch_page jobs, one host, capacity 6")
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=6)
    args = parser.parse_args()

    server = server_url()
    name = f"scrapefleet_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(libpq_url(server), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = sqlalchemy_url(server).set(database=name).render_as_string(hide_password=False)
    engine: Engine | None = None
    try:
        upgrade(url)
        engine = make_engine(url, pool_size=4)
        with LocalSite() as site, tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
            work = Path(tmp)
            urls = pages(site, args.jobs)
            runs = []
            for every, label in ((20, "restart every 20 jobs"), (0, "restarts off")):
                print(f"{label}: {args.jobs} jobs, capacity {args.capacity}", flush=True)
                settings = settings_for(url, work, args.capacity, every)
                runs.append(run_consumer(engine, settings, urls, label))
            print("plain loop: one browser, one page after another", flush=True)
            loop_s = plain_loop(settings_for(url, work, 1, 0), work, urls)
        draw(runs, PLOT)
    finally:
        if engine is not None:
            engine.dispose()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    print(f"\ncores: {os.cpu_count()}, load average at the end: {os.getloadavg()[0]:.1f}")
    loop_rate = args.jobs / loop_s * 60
    for run in runs:
        rate = args.jobs / run.elapsed_s * 60
        print(
            f"{run.label:>22}: {rate:7.1f} jobs/min ({run.elapsed_s:.0f} s);"
            f" {rate / loop_rate:.2f}x the plain loop"
        )
    print(f"{'plain loop':>22}: {loop_rate:7.1f} jobs/min ({loop_s:.0f} s)")
    last = args.jobs - FIRST_JOBS
    for run in runs:
        first, final = run.pss_at(0, FIRST_JOBS), run.pss_at(last, args.jobs)
        change = (final - first) / first * 100 if first else float("nan")
        print(
            f"{run.label:>22}: peak PSS during jobs 1-{FIRST_JOBS} {first / MB:.0f} MB,"
            f" during jobs {last + 1}-{args.jobs} {final / MB:.0f} MB ({change:+.0f}%)"
        )
    print(f"plot: {PLOT}")


if __name__ == "__main__":
    main()
