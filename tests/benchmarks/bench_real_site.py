"""fetch_page over a REAL site (PostgreSQL's HTML manual) through the consumer host, against
hand-written Selenium scripts on the same pages.

    .venv/bin/python -m tests.benchmarks.bench_real_site [--jobs 300] [--capacity 6]
        [--session-jobs 60] [--overload] [--only WORD ...]

Needs the browser stack (.ci/install-browser.sh), PostgreSQL (as bench_browser) and Debian's
postgresql-doc-15, served on 127.0.0.1 by tests.benchmarks.doc_site. One run, the same pages,
each job ``fetch_page`` reading every link's href:

a. the consumer as shipped: the design card's restarts (Grid, Xvfb and every browser every 20
   browser jobs), no ``isolation`` in the payload;
a'. the cheaper policy: each browser retired after 20 of its jobs, the whole stack every 80;
b. one run per isolation level (common.browser.isolation.ISOLATION_VALUES, read at run time),
   default restarts; "session" (a browser per job) on the first --session-jobs pages only;
c. the default with restarts off (no retirement, no stack restart), and "shared" so;
c'. the lighter stacks, restarts off: headless Chromium in the Grid (``browser_headless``), and
   headless Chromium driven by a chromedriver of the host's own, no Grid (``browser_driver``);
   the latter with the default restarts too;
d. a plain loop: one headless ChromeDriver session of our own, the pages one by one
   (get + title + one script returning every a's href);
e. six threads, each its own headless session like (d), sharing the pages through a queue;
f. the floor: the same six threads, each with a session of a host's browser stack (its Xvfb,
   Grid and Chromium, started inside the timing as a consumer's is) reusing its one tab: what
   the stack costs a script that keeps nothing apart and needs no database. Every consumer row
   is read against it (and the lighter stacks against (e)).

``--overload`` instead runs two hosts (bench-1, bench-2: two Consumers, each its own stack and
state directory) on the pages split between them, once alone and once beside a CPU hog
(2 x cores busy-loop processes): throughput, stack faults, restarts and released jobs.

Prints pages/min, the ratios to (d) and (e), jobs not completed, restarts and stack faults
(host_events), CPU per page by process type, the PSS of the browsers during the first 20 pages
and the last 20; draws docs/browser_bench_real_site.png. Never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.browser import isolation as browser_isolation
from scrapefleet.common.settings import Settings, setting_default
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser.stack import browser_stack
from scrapefleet.consumer.browser.stack.grid_driver import CHROME_ARGS
from scrapefleet.consumer.browser.stack.processes import pss_bytes
from scrapefleet.consumer.daemon import Consumer
from tests.benchmarks.bench_browser import FIRST_JOBS, MB, Run, bench_database, settings_for
from tests.benchmarks.bench_contexts import kind_of
from tests.benchmarks.doc_site import DocSite
from tests.benchmarks.round_trips import RoundTrips, counted_round_trips

RESTART_EVERY: int = setting_default("restart_every")
BROWSER_RETIRE_EVERY: int = setting_default("browser_retire_every")

DOCS = Path(__file__).resolve().parents[2] / "docs"
PLOT = DOCS / "browser_bench_real_site.png"
OVERLOAD_PLOT = DOCS / "browser_bench_real_site_overload.png"
FIELDS = {"links": {"css": "a", "attr": "href", "all": True}}
LINKS_JS = "return Array.from(document.querySelectorAll('a'), (a) => a.href);"
CHROMEDRIVER, CHROMIUM = "/usr/bin/chromedriver", "/usr/bin/chromium"
SCRIPT_THREADS = 6
STACK_START_LIMIT_S = 180.0
CPU_SAMPLE_S = 0.25  # a renderer lives about as long as its page: sample well within that
PROGRESS_S = 1.0
PSS_EVERY = 5  # progress ticks between PSS readings away from the first and last pages
KINDS = (
    "browser", "renderer", "gpu-process", "utility/network", "utility/other", "zygote",
    "chromedriver", "java", "Xvfb", "python",
)  # fmt: skip
FAULT_MARKS = ("stack fault", "still busy", "failed to start")  # in a restart's reason
OVERLOAD_HOSTS = ("bench-1", "bench-2")
# One busy core that ends itself after argv[1] seconds, whatever becomes of the benchmark.
HOG_CODE = (
    "import sys, time\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end: pass\n"
)


@dataclass
class RealRun(Run):
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process kind
    machine_cpu_s: float = 0.0  # every process of the machine, the neighbours' too
    bench_cpu_s: float = 0.0  # the measuring's own (sampler, PSS, producer stand-in)
    incomplete: int = 0
    load: float = 0.0  # the machine's 1-minute load average at the run's end
    events: collections.Counter[str] = field(default_factory=collections.Counter)
    restarts: int | None = None  # None: no consumer, nothing to restart
    faults: int = 0
    releases: int = 0  # attempts handed back by a host (jobs.releases)
    requeues: int = 0  # queued jobs handed back before they ran (job_events)
    fault_lines: list[str] = field(default_factory=list)  # logged lines saying "stack fault"
    round_trips: RoundTrips | None = None  # WebDriver and BiDi commands through the Grid

    @property
    def rate(self) -> float:
        """Pages done a minute: a run whose pages failed shows what it did, not its speed."""
        done = self.jobs - self.incomplete
        return done / self.elapsed_s * 60 if self.elapsed_s else 0.0


def kind(process: psutil.Process) -> str:
    """browser, renderer, gpu-process, utility/network, utility/other, zygote, chromedriver,
    java, Xvfb, python (this process), or the executable's name."""
    if process.pid == os.getpid():
        return "python"
    found = kind_of(process)
    if found == "utility":
        network = "NetworkService" in " ".join(process.cmdline())
        return "utility/network" if network else "utility/other"
    return found or process.name()


class CpuSampler:
    """CPU seconds by process kind while the block runs, read from the live processes
    ``find()`` returns, every CPU_SAMPLE_S, keeping the highest reading per pid: a process that
    exits takes its CPU with it (a restart ends a whole stack, a context its renderer), and a
    parent's children_* times would credit a renderer's CPU to its zygote. So what a process
    used in its last < CPU_SAMPLE_S, and processes that lived less than that, are missed: the
    figures are a floor.

    "python" is this process without the measuring: the sampler's thread and the thread that
    entered the block (PSS readings, the producer's stand-in) are taken off it, into
    ``bench_cpu_s``. What is left is the consumer's threads (or the scripts' Selenium clients)."""

    def __init__(self, find: Callable[[], Iterable[psutil.Process]]) -> None:
        self._find = find
        self._base: dict[int, float] = {}
        self._peak: dict[int, tuple[str, float]] = {}
        self._machine: float = 0.0
        self._caller_s: float = 0.0
        self._sampler_s: float = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self.cpu_s: dict[str, float] = {}
        self.machine_cpu_s: float = 0.0
        self.bench_cpu_s: float = 0.0

    def _read(self) -> None:
        for process in self._find():
            try:
                times = process.cpu_times()
                used = times.user + times.system
                seen = self._peak.get(process.pid)
                # Until it is one of KINDS, asked again: a pid changes at exec (Debian's
                # /usr/bin/chromium is a shell script; the Grid starts chromedriver through
                # jspawnhelper), and the browser must not stay filed as its wrapper.
                name = seen[0] if seen is not None and seen[0] in KINDS else kind(process)
                self._peak[process.pid] = (name, used)
            except psutil.Error:  # gone meanwhile
                continue

    def _loop(self) -> None:
        while not self._done.wait(CPU_SAMPLE_S):
            self._read()
        self._sampler_s = time.thread_time()

    def __enter__(self) -> CpuSampler:
        self._read()  # processes already there count from now
        self._base = {pid: used for pid, (_, used) in self._peak.items()}
        self._machine, self._caller_s = _machine_busy_s(), time.thread_time()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)
        self._read()
        totals: dict[str, float] = collections.defaultdict(float)
        for pid, (name, used) in self._peak.items():
            totals[name] += used - self._base.get(pid, 0.0)
        self.bench_cpu_s = self._sampler_s + time.thread_time() - self._caller_s
        totals["python"] -= self.bench_cpu_s
        self.cpu_s = dict(totals)
        self.machine_cpu_s = _machine_busy_s() - self._machine


def _machine_busy_s() -> float:
    """CPU seconds every process of the machine has used (guest time is inside user already,
    steal is the hypervisor's)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0))


class FaultLog(logging.Handler):
    """The consumer's log lines while it runs: those saying "stack fault" are kept; warnings
    and errors still reach stderr (this handler takes lastResort's place)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self._logger = logging.getLogger("scrapefleet")
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.name}: {record.getMessage()}"
        if "stack fault" in line:
            self.lines.append(line)
        if record.levelno >= logging.WARNING:
            print(f"  [{record.levelname.lower()}] {line}", file=sys.stderr, flush=True)

    def __enter__(self) -> FaultLog:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


# -- the consumer -------------------------------------------------------------------------


def run_hosts(
    engine: Engine, hosts: dict[str, Settings], urls: list[str], label: str, **payload: str
) -> RealRun:
    """One Consumer per host (name -> its Settings) on ``urls``, split between them; this
    thread plays the producer (a released job goes back to an active host) and samples."""
    names = list(hosts)
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobs, hosts, job_events, host_events RESTART IDENTITY"))
        jobs = [NewJob("fetch_page", {"url": u, "fields": FIELDS, **payload}) for u in urls]
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
        store.assign_jobs(conn, [(job, names[n % len(names)]) for n, job in enumerate(ids)])
    consumers = [Consumer(settings, engine, name) for name, settings in hosts.items()]
    threads = [
        threading.Thread(target=c.run, kwargs={"until_idle": True}, daemon=True) for c in consumers
    ]

    def stacks_and_me() -> Iterator[psutil.Process]:
        yield psutil.Process()
        for consumer in consumers:
            if consumer.supervisor is not None:
                for stack in consumer.supervisor.stacks():
                    yield from stack.processes()

    def pss() -> int:
        return sum(c.supervisor.memory_pss_bytes() for c in consumers if c.supervisor)

    run = RealRun(label, len(urls))
    limit_s = 120 + 10 * len(urls)  # a bound, far above any run seen here
    with FaultLog() as faults, CpuSampler(stacks_and_me) as cpu, counted_round_trips() as trips:
        started = time.monotonic()
        for thread in threads:
            thread.start()
        try:
            stopping: bool | None = False
            for tick in itertools.count():
                if not wait_a_tick(threads):
                    break
                stopping = _time_limit(
                    time.monotonic() - started, limit_s, label, consumers, stopping
                )
                if stopping is None:
                    break
                live = [c.host for c, t in zip(consumers, threads, strict=True) if t.is_alive()]
                done, memory = _producer_step(engine, live), ""
                if pss_due(tick, done, len(urls)):
                    run.samples.append((time.monotonic() - started, done, pss()))
                    memory = f", PSS {run.samples[-1][2] / MB:.0f} MB"
                print(f"  {label}: {done}/{len(urls)} jobs{memory}", flush=True)
            run.elapsed_s = time.monotonic() - started
        except BaseException:  # Ctrl-C: the consumers stop their stacks, nothing is left behind
            for consumer in consumers:
                consumer.request_cold_stop("benchmark interrupted")
            for thread in threads:
                thread.join(60)
            raise
    run.cpu_s, run.machine_cpu_s, run.fault_lines = cpu.cpu_s, cpu.machine_cpu_s, faults.lines
    run.bench_cpu_s, run.load = cpu.bench_cpu_s, os.getloadavg()[0]
    run.round_trips = trips
    _read_outcome(engine, run)
    return run


def _time_limit(
    elapsed_s: float, limit_s: float, label: str, consumers: list[Consumer], stopping: bool | None
) -> bool | None:
    """Whether the consumers were asked to stop (past ``limit_s``), or None: give up on them."""
    if elapsed_s > limit_s + 120:  # a cold stop takes seconds
        print(f"  {label}: consumers still running; left behind", flush=True)
        return None
    if elapsed_s > limit_s and not stopping:
        print(f"  {label}: still running after {limit_s} s; stopping", flush=True)
        for consumer in consumers:
            consumer.request_cold_stop("benchmark time limit")
        return True
    return stopping


def wait_a_tick(threads: list[threading.Thread]) -> bool:
    """Wait up to PROGRESS_S on a thread still alive (joining one that has ended would return
    at once: a busy loop); False when none is."""
    alive = [thread for thread in threads if thread.is_alive()]
    if alive:
        alive[0].join(PROGRESS_S)
    return bool(alive)


def pss_due(tick: int, done: int, total: int) -> bool:
    """Whether to read the browsers' PSS now. A reading costs ~0.1 s of CPU for a stack of six
    sessions (the kernel walks every page table), taken from the two cores being measured: read
    it at every tick only during the first and the last FIRST_JOBS pages (the table's figures),
    else every PSS_EVERY ticks (the plot)."""
    return done <= FIRST_JOBS or done >= total - FIRST_JOBS or tick % PSS_EVERY == 0


def _producer_step(engine: Engine, live: list[str]) -> int:
    """Jobs a host handed back go to the live, active hosts in turn; returns the jobs done."""
    with engine.begin() as conn:
        active = conn.execute(
            sa.text("SELECT name FROM hosts WHERE state = 'active' AND name = ANY(:live)"),
            {"live": live},
        ).scalars()
        targets = sorted(active)
        if targets:
            due = store.lock_pending_jobs(conn, 100)
            store.assign_jobs(conn, [(p.id, targets[n % len(targets)]) for n, p in enumerate(due)])
        done = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE status IN ('completed', 'failed')")
        ).scalar_one()
    return int(done)


def _read_outcome(engine: Engine, run: RealRun) -> None:
    with engine.connect() as conn:
        run.incomplete = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE status <> 'completed'")
        ).scalar_one()
        run.releases = int(
            conn.execute(sa.text("SELECT coalesce(sum(releases), 0) FROM jobs")).scalar_one()
        )
        run.requeues = conn.execute(
            sa.text(
                "SELECT count(*) FROM job_events"
                " WHERE from_status = 'queued' AND to_status = 'pending'"
            )
        ).scalar_one()
        rows = conn.execute(
            sa.text("SELECT event, coalesce(details->>'reason', message, '') FROM host_events")
        ).all()
    run.events = collections.Counter(event for event, _ in rows)
    run.restarts = run.events["restart"]
    run.faults = run.events["stack_failure"] + sum(
        1 for event, why in rows if event == "restart" and any(m in why for m in FAULT_MARKS)
    )
    run.no_claim_s = []  # (bench_browser's figure; not reported here)


# The cheaper policy one setting away from the card's: browsers retired every 20 of their own
# jobs inside the running Grid, the whole stack every 80.
CHEAPER_RESTART_EVERY_JOBS = 80
LIGHT_HEADLESS = {"browser_headless": True}
LIGHT_NO_GRID = {"browser_driver": "chromedriver", "browser_headless": True}


def consumer_plans(
    args: argparse.Namespace,
) -> list[tuple[str, dict[str, Any], int, dict[str, str]]]:
    """(label, settings over the shipped ones, pages, payload) of every consumer run."""
    off = {"restart_every": 0, "browser_retire_every": 0}
    cheaper = {"restart_every": CHEAPER_RESTART_EVERY_JOBS}
    plans: list[tuple[str, dict[str, Any], int, dict[str, str]]] = [
        (f"consumer default (the card's: whole stack every {RESTART_EVERY})", {}, args.jobs, {}),
        (
            f"cheaper policy: browsers every {BROWSER_RETIRE_EVERY}, stack every"
            f" {CHEAPER_RESTART_EVERY_JOBS}",
            cheaper,
            args.jobs,
            {},
        ),
    ]
    for level in browser_isolation.ISOLATION_VALUES:  # whatever levels there are today
        count = min(args.session_jobs, args.jobs) if level == "session" else args.jobs
        plans.append((f'isolation "{level}"', {}, count, {"isolation": level}))
    plans += [
        ("consumer default, restarts off", off, args.jobs, {}),
        ('isolation "shared", restarts off', off, args.jobs, {"isolation": "shared"}),
        ("headless in the Grid, restarts off", {**off, **LIGHT_HEADLESS}, args.jobs, {}),
        (
            "headless, chromedriver without Grid, restarts off",
            {**off, **LIGHT_NO_GRID},
            args.jobs,
            {},
        ),
        ("headless, chromedriver without Grid, default restarts", LIGHT_NO_GRID, args.jobs, {}),
    ]
    return plans


def seed_class_archive(work: Path, host_dir: Path) -> None:
    """Give a run's host the Grid's class archive the floor's first run dumped, as a host has
    it after its first stack: else every run's first JVMs dump and check one again, a cost a
    host pays once in its life."""
    for archive in sorted(work.glob("grid-before/grid-classes-*.jsa")):
        host_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(archive, host_dir / archive.name)
        print(f"  the host's Grid class archive: {archive.name}, from the floor's run", flush=True)


def consumer_runs(args: argparse.Namespace, urls: list[str], work: Path) -> list[RealRun]:
    runs = []
    with bench_database() as (url, engine):
        for label, overrides, count, payload in consumer_plans(args):
            if args.only and not any(word in label for word in args.only):
                continue
            print(f"{label}: {count} jobs, capacity {args.capacity}", flush=True)
            changed = dict(overrides)
            every = int(changed.pop("restart_every", RESTART_EVERY))
            changed.setdefault("browser_retire_every", BROWSER_RETIRE_EVERY)
            settings = settings_for(url, work, args.capacity, every, label, **changed)
            seed_class_archive(work, settings.state_dir / "stack" / "bench-1")
            runs.append(run_hosts(engine, {"bench-1": settings}, urls[:count], label, **payload))
    return runs


# -- hand-written scripts -----------------------------------------------------------------


def own_chrome() -> tuple[webdriver.Chrome, psutil.Process]:
    """A headless ChromeDriver session started directly, as a script would; its chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.add_argument("--headless=new")
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    options.add_argument("--window-size=1024,700")  # the consumer's screen: the same layout
    service = Service(CHROMEDRIVER)  # a path: no Selenium Manager, no network
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(60)
    assert service.process is not None
    return driver, psutil.Process(service.process.pid)


def _page_outcomes(
    driver: Any, pages: queue.SimpleQueue[str], stop: threading.Event, label: str
) -> Iterator[str]:
    """Pages from the queue until it is empty (or the run is stopped): "done" or "failed"."""
    while not stop.is_set():
        try:
            url = pages.get_nowait()
        except queue.Empty:
            return
        try:
            driver.get(url)
            _ = driver.title, driver.execute_script(LINKS_JS)
            yield "done"
        except WebDriverException as exc:
            print(f"  {label}: {url}: {exc.msg}", file=sys.stderr)
            yield "failed"


def _watch_scripts(
    run: RealRun,
    workers: list[threading.Thread],
    started: float,
    stop: threading.Event,
    finished: Callable[[], int],
    trees: Callable[[], Iterable[psutil.Process]],
) -> None:
    """Until the workers are done (or the run's time limit): progress, and PSS when due."""
    limit_s = 120 + 10 * run.jobs  # bounded; a page load times out in 60 s
    for tick in itertools.count():
        if not wait_a_tick(workers):
            return
        if time.monotonic() - started > limit_s:
            print(f"  {run.label}: still running after {limit_s} s; stopping", flush=True)
            stop.set()
            for worker in workers:
                worker.join(90)  # the page under way: within its page-load timeout
            return
        done = finished()
        if pss_due(tick, done, run.jobs):
            browsers = [p for p in trees() if p.pid != os.getpid()]
            run.samples.append((time.monotonic() - started, done, pss_bytes(browsers)))
        print(f"  {run.label}: {done}/{run.jobs} pages", flush=True)


def scripted(
    urls: list[str],
    threads: int,
    label: str,
    grid_work: Path | None = None,
) -> RealRun:
    """``threads`` threads, each its own session, taking pages from one queue. Timed from
    before the sessions start, as a consumer run is timed from before its stack starts.
    ``grid_work``: the sessions come from a browser stack started there (inside the timing),
    its processes counted as a consumer host's are; else each is a headless ChromeDriver."""
    pages: queue.SimpleQueue[str] = queue.SimpleQueue()
    for url in urls:
        pages.put(url)
    drivers: list[psutil.Process] = []
    counts = {"done": 0, "failed": 0}
    lock = threading.Lock()
    stop = threading.Event()  # the run's time limit

    stacks: list[browser_stack.BrowserStack] = []
    stack_ready = threading.Event()

    def session() -> Any:
        if grid_work is None:
            driver, service = own_chrome()
            with lock:
                drivers.append(service)
            return driver
        if not stack_ready.wait(STACK_START_LIMIT_S) or not stacks:
            raise RuntimeError(f"{label}: the browser stack did not start")
        return stacks[0].new_driver()

    def work() -> None:
        driver = session()
        try:
            for outcome in _page_outcomes(driver, pages, stop, label):
                with lock:
                    counts[outcome] += 1
        finally:
            driver.quit()

    def trees() -> Iterator[psutil.Process]:
        yield psutil.Process()
        for stack in list(stacks):
            yield from stack.processes()
        for service in list(drivers):
            try:
                yield from (service, *service.children(recursive=True))
            except psutil.Error:
                continue

    run = RealRun(label, len(urls))
    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    with CpuSampler(trees) as cpu, contextlib.ExitStack() as resources:
        started = time.monotonic()
        for worker in workers:
            worker.start()
        if grid_work is not None:
            try:  # whatever happens, the workers stop waiting for the stack
                grid_work.mkdir(parents=True, exist_ok=True)
                settings = settings_for("postgresql://unused/none", grid_work, threads, 0, label)
                work_dir = grid_work / "stack"
                stack = browser_stack.BrowserStack(settings, "grid-script", threads, work_dir)
                stacks.append(resources.enter_context(stack))
            finally:
                stack_ready.set()
        finished = lambda: counts["done"] + counts["failed"]  # noqa: E731
        _watch_scripts(run, workers, started, stop, finished, trees)
        run.elapsed_s = time.monotonic() - started
    run.cpu_s, run.machine_cpu_s, run.bench_cpu_s = cpu.cpu_s, cpu.machine_cpu_s, cpu.bench_cpu_s
    run.load = os.getloadavg()[0]
    run.incomplete = len(urls) - counts["done"]
    return run


# -- overload -----------------------------------------------------------------------------


class CpuHog:
    """``count`` busy-loop processes of our own; each exits by itself after ``limit_s`` and is
    ended by its PID when the block ends, however it ends."""

    def __init__(self, count: int, limit_s: float) -> None:
        self.count, self.limit_s = count, limit_s
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CpuHog:
        try:
            for _ in range(self.count):
                argv = [sys.executable, "-c", HOG_CODE, str(self.limit_s)]
                self._procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.kill()  # Popen.kill: its own PID, and only while it was not reaped
        for proc in self._procs:
            proc.wait(10)


def overload_runs(args: argparse.Namespace, urls: list[str], work: Path) -> list[RealRun]:
    runs = []
    hog_count = 2 * (os.cpu_count() or 1)
    with bench_database(pool_size=8) as (url, engine):
        for hog in (False, True):
            label = f"two hosts, beside {hog_count} CPU hogs" if hog else "two hosts"
            hosts = {
                host: settings_for(url, work, args.capacity, RESTART_EVERY, f"{label}-{host}")
                for host in OVERLOAD_HOSTS
            }
            print(f"{label}: {len(urls)} jobs, capacity {args.capacity} each", flush=True)
            if hog:
                with CpuHog(hog_count, limit_s=180 + 10 * len(urls)):
                    runs.append(run_hosts(engine, hosts, urls, label))
            else:
                runs.append(run_hosts(engine, hosts, urls, label))
    return runs


# -- the report ---------------------------------------------------------------------------


def _pss(run: RealRun) -> str:
    first, last = run.pss_at(0, FIRST_JOBS), run.pss_at(run.jobs - FIRST_JOBS, run.jobs)
    return f"{first / MB:.0f} MB | {last / MB:.0f} MB"


def _ratio(run: RealRun, base: RealRun | float | None) -> str:
    rate = base.rate if isinstance(base, RealRun) else base
    return f"{run.rate / rate:.2f}" if rate else "-"


def throughput_table(runs: list[RealRun], loop: RealRun, threads: RealRun, floor: float) -> None:
    """Every run against the floor of the same run (six scripted threads through a host's own
    Grid under Xvfb: the mean of its two runs, before and after the others, so that a machine
    whose neighbours' load changes during the run weighs on both ends alike), and against six
    scripted headless threads (the lighter stacks' baseline) and the plain loop."""
    print(
        f"| run | pages | pages/min | x the floor | x {SCRIPT_THREADS} headless threads"
        " | x plain loop | not completed | restarts | stack faults"
        f" | PSS pages 1-{FIRST_JOBS} | PSS last {FIRST_JOBS} | PSS last/first | load at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        restarts = "-" if run.restarts is None else str(run.restarts)
        faults = "-" if run.restarts is None else str(run.faults)
        first, last = run.pss_at(0, FIRST_JOBS), run.pss_at(run.jobs - FIRST_JOBS, run.jobs)
        growth = f"{last / first:.2f}" if first else "-"
        print(
            f"| {run.label} | {run.jobs} | {run.rate:.0f} | {_ratio(run, floor)}"
            f" | {_ratio(run, threads)} | {_ratio(run, loop)} | {run.incomplete} | {restarts}"
            f" | {faults} | {_pss(run)} | {growth} | {run.load:.1f} |"
        )


def cpu_table(runs: list[RealRun]) -> None:
    print(f"\nCPU ms per page (sampled every {CPU_SAMPLE_S} s; 'machine': neighbours' too)")
    print(f"| run | {' | '.join(KINDS)} | other | all these | machine |")
    print("|---|" + "---|" * (len(KINDS) + 3))
    for run in runs:
        cpu = collections.Counter(run.cpu_s)
        other = sum(v for k, v in cpu.items() if k not in KINDS)
        cells = [cpu[k] for k in KINDS] + [other, sum(cpu.values()), run.machine_cpu_s]
        print(f"| {run.label} | " + " | ".join(f"{s * 1000 / run.jobs:.0f}" for s in cells) + " |")
    for run in runs:
        others = {k: v for k, v in run.cpu_s.items() if k not in KINDS and v > 0}
        listed = ", ".join(f"{k} {v * 1000 / run.jobs:.0f}" for k, v in sorted(others.items()))
        print(
            f"{run.label}: other = {listed or 'none'};"
            f" the measuring's own {run.bench_cpu_s * 1000 / run.jobs:.0f} ms/page (not counted)"
        )


def overload_table(runs: list[RealRun]) -> None:
    alone = runs[0].rate
    print(
        "| run | pages | pages/min | x alone | not completed | restarts | stack faults"
        ' | releases | requeues | "stack fault" log lines | CPU ms/page: hosts / machine'
        " | load at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        hosts_ms, machine_ms = (
            s * 1000 / run.jobs for s in (sum(run.cpu_s.values()), run.machine_cpu_s)
        )
        print(
            f"| {run.label} | {run.jobs} | {run.rate:.0f} | {run.rate / alone:.2f}"
            f" | {run.incomplete} | {run.restarts} | {run.faults} | {run.releases}"
            f" | {run.requeues} | {len(run.fault_lines)} | {hosts_ms:.0f} / {machine_ms:.0f}"
            f" | {run.load:.1f} |"
        )
    for run in runs:
        print(f"{run.label}: host_events {dict(run.events)}")
        for line in run.fault_lines[:20]:
            print(f"  {line}")


def draw(runs: list[RealRun], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, cpu, memory) = plt.subplots(1, 3, figsize=(17, 5), width_ratios=(2, 2, 3))
    labels = [run.label for run in runs]
    speed.barh(labels, [run.rate for run in runs], color="tab:blue")
    speed.set_xlabel("pages/min")
    speed.invert_yaxis()
    speed.grid(axis="x", alpha=0.3)
    left = [0.0] * len(runs)
    # tab20 is a ListedColormap, which has .colors; get_cmap is typed as returning any Colormap.
    cmap: Any = plt.get_cmap("tab20")
    colors = cmap.colors
    for n, name in enumerate((*KINDS, "other")):
        per_page = [
            (run.cpu_s.get(name, 0.0) if name != "other" else
             sum(v for k, v in run.cpu_s.items() if k not in KINDS)) * 1000 / run.jobs
            for run in runs
        ]  # fmt: skip
        if any(per_page):
            cpu.barh(labels, per_page, left=left, label=name, color=colors[n])
            left = [a + b for a, b in zip(left, per_page, strict=True)]
    cpu.set_xlabel("CPU ms per page, by process")
    cpu.set_yticks(range(len(runs)), [""] * len(runs))
    cpu.invert_yaxis()
    cpu.legend(fontsize="x-small", ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    cpu.grid(axis="x", alpha=0.3)
    for run in runs:
        live = [s for s in run.samples if s[2]]  # not before the browsers start, nor after
        memory.plot([s[1] for s in live], [s[2] / MB for s in live], label=run.label)
    memory.set_xlabel("pages finished")
    memory.set_ylabel("PSS of the browsers (MB)")
    memory.grid(alpha=0.3)
    memory.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")


def machine_line(load_before: float) -> str:
    return (
        f"cores (nproc): {os.cpu_count()}, load average (1 min) before: {load_before:.1f},"
        f" after: {os.getloadavg()[0]:.1f}, CPU sampled every {CPU_SAMPLE_S} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--capacity", type=int, default=6)
    parser.add_argument("--session-jobs", type=int, default=60)
    parser.add_argument("--overload", action="store_true", help="two hosts, with and without a hog")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="the site answers each request after this long, as a real site does (default 0:"
        " at once, every page CPU-bound)",
    )
    parser.add_argument(
        "--only",
        action="append",
        help="run only the consumer runs whose label holds this word (repeatable)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    if not 0 <= args.latency_ms <= 10_000:
        parser.error(f"--latency-ms {args.latency_ms:g}: must be between 0 and 10000")
    site_latency_s = args.latency_ms / 1000
    with (
        DocSite(latency_s=site_latency_s) as site,
        tempfile.TemporaryDirectory(prefix="sf-real-") as tmp,
    ):
        urls = site.pages(args.jobs)
        if args.overload:
            runs = overload_runs(args, urls, Path(tmp))
            print(f"\n{machine_line(load_before)}")
            overload_table(runs)
            draw(runs, OVERLOAD_PLOT, "Two consumer hosts on PostgreSQL's manual, with a CPU hog")
            print(f"plot: {OVERLOAD_PLOT}")
            return
        # The floor every consumer row is read against: always measured, in the same run, first
        # and last.
        label = (
            f"{SCRIPT_THREADS} hand-written threads through a host's Grid under Xvfb (the floor)"
        )
        print(f"{label}, before", flush=True)
        floors = [scripted(urls, SCRIPT_THREADS, f"{label}, before", Path(tmp) / "grid-before")]
        runs = consumer_runs(args, urls, Path(tmp))
        print("plain loop: one headless ChromeDriver session, one page after another", flush=True)
        loop = scripted(urls, 1, "plain loop, one session")
        print(f"{SCRIPT_THREADS} threads, each its own session", flush=True)
        threads = scripted(urls, SCRIPT_THREADS, f"{SCRIPT_THREADS} hand-written threads")
        runs += [loop, threads]
        print(f"{label}, after", flush=True)
        floors.append(scripted(urls, SCRIPT_THREADS, f"{label}, after", Path(tmp) / "grid-after"))
        runs += floors
    floor = sum(run.rate for run in floors) / len(floors)
    print(
        f"\n{machine_line(load_before)}; the site answers after {args.latency_ms:g} ms;"
        f" the floor: {floor:.0f} pages/min (mean of its two runs)"
    )
    throughput_table(runs, loop, threads, floor)
    cpu_table(runs)
    for run in runs:
        if run.events:
            print(f"{run.label}: host_events {dict(run.events)}; releases {run.releases}")
    for run in runs:
        if run.round_trips is not None:
            trips = run.round_trips
            print(
                f"{run.label}: {trips.total / run.jobs:.1f} round trips through the Grid a job"
                f" ({trips.describe(run.jobs)})"
            )
    draw(runs, PLOT, f"fetch_page on PostgreSQL's manual ({args.jobs} pages), capacity 6")
    print(f"plot: {PLOT}")


if __name__ == "__main__":
    main()
