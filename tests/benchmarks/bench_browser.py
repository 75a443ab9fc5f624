"""fetch_page jobs through one consumer host, against a plain loop on one browser session.

    .venv/bin/python -m tests.benchmarks.bench_browser [--jobs 300] [--session-jobs 60]
        [--page /item|/slow]

Needs the browser stack (.ci/install-browser.sh) and PostgreSQL (SCRAPEFLEET_TEST_DATABASE_URL,
else 127.0.0.1:5432, else an embedded pgserver), in a database of its own, dropped at the end.

One run, the same pages (the local test site), capacity 6, a real Consumer with its own stack.
``--page /item`` (the default) is a small page served at once: the figures are the scheduler's
and the browser's overhead per job. ``--page /slow`` answers after a second, as many real sites
do: the figures are what a fleet waiting on the network gets.


1. the default: warm sessions, a fresh user context per job, overlapped restarts every 20;
2. every job with ``isolation: "session"`` (a new browser per job; the first 60 pages),
   restarts every 20;
3. restarts off (warm contexts);
4. a plain loop: one browser session fetching the same pages one by one (the floor).

Prints jobs/min and the ratio to the plain loop; per restart, how long browser jobs could not be
claimed (``host_events`` 'restart' rows, p50 and max); the PSS of the host's browser stacks
during the first 20 jobs and the last 20; draws both to docs/browser_bench.png. Never passes or
fails on figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import libpq_url, make_engine, sqlalchemy_url
from scrapefleet.common.db.migrate import upgrade
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser.actions.selenium_actions import FetchPageParams, fetch_page
from scrapefleet.consumer.browser.sessions.session_operations import quit_driver
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.daemon import Consumer
from tests.browser.site import LocalSite

HOST = "bench-1"
PLOT = Path(__file__).resolve().parents[2] / "docs" / "browser_bench.png"
SAMPLE_S = 1.0
MB = 1024 * 1024
FIRST_JOBS = 20


@dataclass
class Run:
    label: str
    jobs: int = 0
    elapsed_s: float = 0.0
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, done, PSS)
    no_claim_s: list[float] = field(default_factory=list)  # per restart

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


def settings_for(
    database_url: str,
    work: Path,
    capacity: int,
    restart_every: int,
    label: str = "loop",
    **overrides: object,
) -> Settings:
    boot_id = work / "boot_id"
    boot_id.write_text("bench\n")
    return load_settings(
        None,
        database_url=database_url,
        state_dir=work / f"state-{uuid.uuid5(uuid.NAMESPACE_OID, label).hex[:8]}",
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
        **overrides,
    )


def pages(site: LocalSite, count: int, path: str = "/item") -> list[str]:
    return [site.url(f"{path}?n={n}") for n in range(count)]


def run_consumer(
    engine: Engine, settings: Settings, urls: list[str], label: str, **payload: str
) -> Run:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, hosts, job_events, host_events RESTART IDENTITY"))
        jobs = [NewJob("fetch_page", {"url": url, **payload}, max_attempts=3) for url in urls]
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, HOST) for i in ids])
    consumer = Consumer(settings, engine, HOST)
    thread = threading.Thread(target=consumer.run, kwargs={"until_idle": True}, daemon=True)
    run = Run(label, len(urls))
    started = time.monotonic()
    thread.start()
    try:
        sample_until_done(engine, consumer, thread, run, started, len(urls))
        run.elapsed_s = time.monotonic() - started
    except BaseException:  # Ctrl-C: the consumer stops its stacks, nothing is left behind
        consumer.request_cold_stop("benchmark interrupted")
        thread.join(60)
        raise
    with engine.connect() as conn:
        failed = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE status <> 'completed'")
        ).scalar_one()
        restarts = conn.execute(
            sa.text("SELECT details FROM host_events WHERE event = 'restart' ORDER BY id")
        ).scalars()
        # Overlapped: the time browser claims waited for the next stack; draining: the whole
        # restart (the host claimed nothing from the budget to the new stack).
        run.no_claim_s = [float(d.get("no_claim_s", d.get("duration_s", 0.0))) for d in restarts]
    if failed:
        print(f"  {label}: {failed} job(s) did not complete")
    return run


def sample_until_done(
    engine: Engine,
    consumer: Consumer,
    thread: threading.Thread,
    run: Run,
    started: float,
    total: int,
) -> None:
    """Until the consumer is idle: the producer's part, and the PSS of the host's stacks."""
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
        pss = supervisor.memory_pss_bytes() if supervisor else 0
        run.samples.append((time.monotonic() - started, done, pss))
        print(f"  {run.label}: {done}/{total} jobs, stack PSS {pss / MB:.0f} MB", flush=True)


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
            quit_driver(driver)


def draw(runs: list[Run], rates: dict[str, float], path: Path, page: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, memory) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(2, 3))
    speed.barh(list(rates), list(rates.values()), color="tab:blue")
    speed.set_xlabel("fetch_page jobs/min")
    speed.invert_yaxis()
    speed.grid(axis="x", alpha=0.3)
    for run in runs:
        memory.plot([s[1] for s in run.samples], [s[2] / MB for s in run.samples], label=run.label)
    memory.set_xlabel("jobs finished")
    memory.set_ylabel("PSS of the host's browser stacks (MB)")
    memory.grid(alpha=0.3)
    memory.legend()
    fig.suptitle(f"One consumer host, capacity 6, the same local pages ({page})")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@contextmanager
def bench_database(pool_size: int = 4) -> Iterator[tuple[str, Engine]]:
    """A throwaway database with the schema (its URL and an engine), dropped at the end."""
    server = server_url()
    name = f"scrapefleet_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(libpq_url(server), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = sqlalchemy_url(server).set(database=name).render_as_string(hide_password=False)
    engine: Engine | None = None
    try:
        upgrade(url)
        engine = make_engine(url, pool_size=pool_size)
        yield url, engine
    finally:
        if engine is not None:
            engine.dispose()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def consumer_runs(args: argparse.Namespace, site: LocalSite, work: Path) -> list[Run]:
    runs = []
    with bench_database() as (url, engine):
        urls = pages(site, args.jobs, args.page)
        for label, every, count, payload in (
            ("default (contexts, overlapped restarts every 20)", 20, args.jobs, {}),
            (
                'isolation "session", restarts every 20',
                20,
                args.session_jobs,  # a browser per job is slow: fewer of the same pages
                {"isolation": "session"},
            ),
            ("restarts off", 0, args.jobs, {}),
        ):
            print(f"{label}: {count} jobs, capacity {args.capacity}", flush=True)
            settings = settings_for(url, work, args.capacity, every, label)
            runs.append(run_consumer(engine, settings, urls[:count], label, **payload))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--capacity", type=int, default=6)
    parser.add_argument("--session-jobs", type=int, default=60)
    parser.add_argument("--page", choices=("/item", "/slow"), default="/item")
    args = parser.parse_args()

    with LocalSite() as site, tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
        work = Path(tmp)
        urls = pages(site, args.jobs, args.page)
        runs = consumer_runs(args, site, work)
        print("plain loop: one browser, one page after another", flush=True)
        loop_s = plain_loop(settings_for("postgresql://unused/none", work, 1, 0), work, urls)

    print(
        f"\npage: {args.page}, cores: {os.cpu_count()},"
        f" load average at the end: {os.getloadavg()[0]:.1f}"
    )
    loop_rate = args.jobs / loop_s * 60
    rates = {run.label: run.jobs / run.elapsed_s * 60 for run in runs}
    rates["plain loop, one session"] = loop_rate
    print(
        f"| run | jobs | jobs/min | x plain loop | no-claim s per restart p50 / max |"
        f" PSS jobs 1-{FIRST_JOBS} | PSS last {FIRST_JOBS} |"
    )
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        last = run.jobs - FIRST_JOBS
        rate = rates[run.label]
        pauses = sorted(run.no_claim_s)
        pause = (
            f"{statistics.median(pauses):.2f} / {pauses[-1]:.2f} ({len(pauses)} restarts)"
            if pauses
            else "no restart"
        )
        first, final = run.pss_at(0, FIRST_JOBS), run.pss_at(last, run.jobs)
        print(
            f"| {run.label} | {run.jobs} | {rate:.0f} | {rate / loop_rate:.2f} | {pause} |"
            f" {first / MB:.0f} MB | {final / MB:.0f} MB"
            f" ({(final - first) / first * 100 if first else float('nan'):+.0f}%) |"
        )
    print(f"| plain loop, one session | {args.jobs} | {loop_rate:.0f} | 1.00 | - | - | - |")
    plot = PLOT if args.page == "/item" else PLOT.with_name(f"browser_bench_{args.page[1:]}.png")
    draw(runs, rates, plot, args.page)
    print(f"plot: {plot}")


if __name__ == "__main__":
    main()
