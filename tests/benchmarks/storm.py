"""A fault storm over mixed jobs on a local fleet, and what must hold through it.

Three consumer hosts with browser stacks and two producers run as real processes
(common.local.local_fleet) on a PostgreSQL cluster of the storm's own (pg_createcluster: it
is restarted during the storm, so never the machine's shared server). Jobs are submitted
throughout: ``fetch_page`` and ``http_get`` on a loopback site that logs its own requests
(tests.integration.request_log_site), ``noop`` with sleeps, and jobs sharing a few
``lock_key``s. Meanwhile, at random times (``--seed``): consumers SIGKILLed and started again,
the leading producer SIGKILLed, Chromium renderers and browsers SIGKILLed, Grid JVMs
SIGKILLed, one consumer SIGSTOPped across the rescue, PostgreSQL restarted twice (immediate,
then fast), and a CPU hog on every core for a while. The rates are the issue's (per minute of a
12-minute storm), scaled to ``--minutes``.

Then the faults stop, every job is waited for, and the storm checks:

- 0 lost (every job completed or failed), 0 completed twice (job_events);
- 0 lock-key overlaps: the site's own log never shows two requests of one key at once;
- 0 cap breaches: never more jobs processing on a host than its capacity, nor more Chromium
  browsers on it (sampled);
- no job failed, and none charged an attempt (``attempts`` > 1): every page answers, so any
  failure is the hosts'; ``page_releases`` are reported (a browser killed under a page still
  counts as the page's);
- every daemon exits 0 on SIGTERM and no process of a stack is left.

    .venv/bin/python -m tests.benchmarks.storm --minutes 4          # what the docs quote
    .venv/bin/python -m tests.benchmarks.storm --minutes 12 --jobs-per-minute 100  # the issue's

Exit status 0 when everything held, 1 otherwise; figures on stdout. Not for CI: minutes long.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import sqlalchemy as sa

from scrapefleet.common import store
from scrapefleet.common.db.migrate import upgrade
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.consumer.browser.stack.processes import WORK_DIR_ENV
from tests.integration.request_log_site import RequestLog, request_log_site

PG_VERSION = "15"
HOSTS = ("h1", "h2", "h3")
CAPACITY = 3
# The issue's storm: these many of each fault in 12 minutes.
ISSUE_MINUTES = 12.0
ISSUE_FAULTS = {"consumer": 15, "leader": 7, "chromium": 34, "grid": 5}
LOCK_KEYS = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ the storm's own database


@contextlib.contextmanager
def own_cluster(name: str) -> Iterator[str]:
    """A PostgreSQL cluster of our own on a free port (trust on loopback), dropped at the end."""
    port = free_port()
    subprocess.run(
        ["pg_createcluster", PG_VERSION, name, "-p", str(port), "--start",
         "-o", "max_connections=200", "-o", "fsync=off", "--", "--auth=trust"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        server = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute("CREATE DATABASE storm")
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/storm"
        upgrade(url)
        yield url
    finally:
        subprocess.run(
            ["pg_dropcluster", "--stop", PG_VERSION, name], capture_output=True, timeout=120
        )


def restart_cluster(name: str, mode: str) -> float:
    started = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, name, "restart", "-m", mode],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return time.monotonic() - started


# ------------------------------------------------------------------ the fleet's processes


def stack_processes(state_dir: Path, host: str | None = None) -> list[psutil.Process]:
    """Processes of the storm's browser stacks (of one host), by the stack's own mark."""
    prefix = str(state_dir / "stack" / (host or ""))
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            # Renderers retitle themselves over their environment: their command line names
            # the profile directory, under the stack's TMPDIR.
            if any(prefix in arg for arg in proc.cmdline()[1:]) or proc.environ().get(
                WORK_DIR_ENV, ""
            ).startswith(prefix):
                found.append(proc)
    return found


def _described(proc: psutil.Process) -> str:
    """A browser process for a breach's report: pid, age, parent, stack directory."""
    with contextlib.suppress(psutil.Error):
        parent = proc.parent()
        folder = next((a for a in proc.cmdline() if a.startswith("--user-data-dir=")), "")
        return (
            f"{proc.pid} {time.time() - proc.create_time():.0f}s old"
            f" parent {parent.pid if parent else None} {parent.name() if parent else ''}"
            f" {folder[-60:]}"
        )
    return f"{proc.pid} gone"


def _kind(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        line = proc.cmdline()
        name = proc.name()
        if name == "java":
            return "grid"
        if name in ("chromium", "chrome"):  # not chrome_crashpad_handler
            if "--type=renderer" in line and "--extension-process" not in line:
                return "renderer"
            # A browser's own process names its profile and was started by chromedriver; the
            # helpers it forks keep its command line until they take their --type, and are not
            # browsers (counting them made false breaches).
            parent = proc.parent()
            if (
                not any(arg.startswith("--type=") for arg in line)
                and any(arg.startswith("--user-data-dir=") for arg in line)
                and (parent is None or parent.name() not in ("chromium", "chrome"))
            ):
                return "browser"
    return "other"


@dataclass
class Figures:
    faults: Counter[str] = field(default_factory=Counter)
    takeovers_s: list[float] = field(default_factory=list)
    pg_restarts_s: list[float] = field(default_factory=list)
    processing_breaches: list[str] = field(default_factory=list)
    browser_breaches: list[str] = field(default_factory=list)
    most_processing: int = 0
    most_browsers: int = 0
    submitted: int = 0


class Storm:
    def __init__(self, args: argparse.Namespace, work: Path, url: str, cluster: str) -> None:
        self.args = args
        self.url = url
        self.cluster = cluster
        self.state_dir = work / "state"
        self.engine = sa.create_engine(url, pool_pre_ping=True)
        self.random = random.Random(args.seed)
        self.figures = Figures()
        self.stop = threading.Event()
        self.started = time.monotonic()
        rescue = args.rescue_after_s
        self.fleet = LocalFleet(
            url,
            self.state_dir,
            list(HOSTS),
            producers=2,
            log_dir=work / "logs",
            env={
                "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
                "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
                "SCRAPEFLEET_HEARTBEAT_S": "0.5",
                "SCRAPEFLEET_RESCUE_AFTER_S": str(rescue),
                "SCRAPEFLEET_LOCK_LINGER_S": str(rescue),
                "SCRAPEFLEET_OFFLINE_GRACE_S": "5",
                "SCRAPEFLEET_BACKOFF_BASE_S": "0.5",
                "SCRAPEFLEET_BACKOFF_MAX_S": "5",
                "SCRAPEFLEET_CAPACITY": str(CAPACITY),
                "SCRAPEFLEET_REBOOT_EVERY": "0",
                "SCRAPEFLEET_STACK_RETRY_BASE_S": "2",
                "SCRAPEFLEET_STACK_RETRY_MAX_S": "10",
                "SCRAPEFLEET_JOB_TIMEOUT_S": "120",
            },
        )

    # -- jobs ------------------------------------------------------------------------------

    def submit_batch(self, base: str, count: int, serial: int) -> int:
        jobs = []
        for n in range(serial, serial + count):
            roll = self.random.random()
            if roll < 1 / 3:
                url = f"{base}/stream?job=F{n}&seconds=0.3"
                jobs.append(NewJob("fetch_page", {"url": url}, max_attempts=3))
            elif roll < 2 / 3:
                url = f"{base}/stream?job=H{n}&seconds={self.random.choice((0.2, 1, 3))}"
                jobs.append(NewJob("http_get", {"url": url, "timeout_s": 60}, max_attempts=3))
            elif roll < 11 / 12:
                sleep_s = self.random.choice((0.0, 0.5, 2.0, 5.0))
                jobs.append(NewJob("noop", {"sleep_s": sleep_s}, max_attempts=3))
            else:
                key = f"K{self.random.randrange(LOCK_KEYS)}"
                url = f"{base}/stream?job={key}-{n}&seconds=2"
                if self.random.random() < 0.5:
                    job = NewJob("http_get", {"url": url, "timeout_s": 60}, lock_key=key)
                else:
                    job = NewJob("fetch_page", {"url": url}, lock_key=key)
                jobs.append(job)
        with self.engine.begin() as conn:
            store.insert_jobs(conn, jobs, default_max_attempts=3)
        return serial + count

    def submitter(self, base: str, until: float) -> None:
        per_batch = max(1, round(self.args.jobs_per_minute / 6))  # a batch every 10 s
        serial = 0
        while time.monotonic() < until and not self.stop.is_set():
            with contextlib.suppress(Exception):  # the database restarting: the next batch
                serial = self.submit_batch(base, per_batch, serial)
                self.figures.submitted = serial
            self.stop.wait(10)

    # -- faults ----------------------------------------------------------------------------

    def plan(self, duration_s: float) -> list[tuple[float, str]]:
        scale = self.args.minutes / ISSUE_MINUTES
        planned = [
            (self.random.uniform(0.05, 0.85) * duration_s, kind)
            for kind, count in ISSUE_FAULTS.items()
            for _ in range(max(1, round(count * scale)))
        ]
        planned += [
            (0.30 * duration_s, "pg-immediate"),
            (0.45 * duration_s, "sigstop"),
            (0.60 * duration_s, "cpu-hog"),
            (0.70 * duration_s, "pg-fast"),
        ]
        return sorted(planned)

    def run_faults(self, started: float, duration_s: float) -> None:
        for at, kind in self.plan(duration_s):
            if self.stop.wait(max(0.0, started + at - time.monotonic())):
                return
            try:
                getattr(self, "fault_" + kind.replace("-", "_"))()
            except Exception as exc:  # one fault that could not be done is reported, not fatal
                self.figures.faults[f"{kind} not done"] += 1
                print(f"  {kind}: not done ({type(exc).__name__}: {exc})", flush=True)

    def _later(self, delay_s: float, then: Callable[[], Any]) -> None:
        timer = threading.Timer(delay_s, then)
        timer.daemon = True
        timer.start()

    def fault_consumer(self) -> None:
        host = self.random.choice(HOSTS)
        name = f"consumer-{host}"
        if self.fleet.processes[name].poll() is not None:
            raise RuntimeError(f"{name} is not running")
        self.fleet.signal(name, signal.SIGKILL)
        self.fleet.processes[name].wait(10)
        self.figures.faults["consumer"] += 1
        self._later(self.random.uniform(0.5, 3.0), lambda: self.fleet.start_consumer(host))

    def fault_leader(self) -> None:
        leader = self._leader_pid()
        name = next((n for n, p in self.fleet.processes.items() if p.pid == leader), None)
        if name is None:
            raise RuntimeError("no leading producer")
        self.fleet.signal(name, signal.SIGKILL)
        self.fleet.processes[name].wait(10)
        killed = time.monotonic()
        self.figures.faults["leader"] += 1
        while time.monotonic() - killed < 60:
            with contextlib.suppress(Exception):
                now_leader = self._leader_pid()
                if now_leader not in (None, leader):
                    self.figures.takeovers_s.append(time.monotonic() - killed)
                    break
            time.sleep(0.05)
        self.fleet.start_producer(name)

    def _leader_pid(self) -> int | None:
        with self.engine.connect() as conn:
            name = conn.execute(
                sa.text(
                    "SELECT a.application_name FROM pg_locks l"
                    " JOIN pg_stat_activity a ON a.pid = l.pid"
                    " WHERE l.locktype = 'advisory' AND l.granted"
                    " AND a.datname = current_database()"
                    " AND a.application_name LIKE 'scrapefleet-producer-%'"
                )
            ).scalar()
        return int(name.rsplit("-", 1)[1]) if name else None

    def fault_chromium(self) -> None:
        procs = stack_processes(self.state_dir)
        renderers = [p for p in procs if _kind(p) == "renderer"]
        browsers = [p for p in procs if _kind(p) == "browser"]
        # Mostly renderers (the page's process), a browser now and then.
        renderer = bool(renderers) and (self.random.random() < 0.75 or not browsers)
        pool = renderers if renderer else browsers
        if not pool:
            raise RuntimeError("no Chromium running")
        self.random.choice(pool).send_signal(signal.SIGKILL)
        self.figures.faults["chromium renderer" if renderer else "chromium browser"] += 1

    def fault_grid(self) -> None:
        grids = [p for p in stack_processes(self.state_dir) if _kind(p) == "grid"]
        if not grids:
            raise RuntimeError("no Grid running")
        self.random.choice(grids).send_signal(signal.SIGKILL)
        self.figures.faults["grid"] += 1

    def fault_sigstop(self) -> None:
        name = f"consumer-{self.random.choice(HOSTS)}"
        self.fleet.signal(name, signal.SIGSTOP)
        self.figures.faults["sigstop"] += 1
        stopped_s = self.args.rescue_after_s * 1.5

        def go_on() -> None:
            with contextlib.suppress(ProcessLookupError):
                self.fleet.signal(name, signal.SIGCONT)

        self._later(stopped_s, go_on)

    def fault_pg_immediate(self) -> None:
        self.figures.pg_restarts_s.append(restart_cluster(self.cluster, "immediate"))
        self.figures.faults["pg restart (immediate)"] += 1

    def fault_pg_fast(self) -> None:
        self.figures.pg_restarts_s.append(restart_cluster(self.cluster, "fast"))
        self.figures.faults["pg restart (fast)"] += 1

    def fault_cpu_hog(self) -> None:
        hog_s = self.args.minutes * 60 * 0.15
        code = f"import time\nend = time.monotonic() + {hog_s}\nwhile time.monotonic() < end: pass"
        for _ in range(os.cpu_count() or 1):
            subprocess.Popen([sys.executable, "-c", code])  # ends by itself
        self.figures.faults["cpu hog (s)"] += round(hog_s)

    # -- what is sampled -------------------------------------------------------------------

    def sampler(self) -> None:
        while not self.stop.wait(1.0):
            with contextlib.suppress(Exception):
                with self.engine.connect() as conn:
                    rows = conn.execute(
                        sa.text(
                            "SELECT host, count(*) FROM jobs WHERE status = 'processing'"
                            " GROUP BY host"
                        )
                    ).all()
                for host, count in rows:
                    self.figures.most_processing = max(self.figures.most_processing, count)
                    if count > CAPACITY:
                        self.figures.processing_breaches.append(f"{host}: {count} processing")
            with contextlib.suppress(Exception):
                for host in HOSTS:
                    browsers = [
                        p for p in stack_processes(self.state_dir, host) if _kind(p) == "browser"
                    ]
                    self.figures.most_browsers = max(self.figures.most_browsers, len(browsers))
                    if len(browsers) > CAPACITY:
                        at = time.monotonic() - self.started
                        self.figures.browser_breaches.append(
                            f"{at:.0f} s {host}: {len(browsers)} browsers: "
                            + "; ".join(_described(p) for p in browsers)
                        )

    # -- the whole of it -------------------------------------------------------------------

    def run(self, base: str, log: RequestLog) -> dict[str, Any]:
        with self.engine.begin() as conn:
            for host in HOSTS:
                store.add_host(conn, HostSpec(name=host, capacity=CAPACITY))
        duration_s = self.args.minutes * 60
        self.fleet.start()
        started = self.started = time.monotonic()
        threads = [
            threading.Thread(target=self.submitter, args=(base, started + duration_s * 0.9)),
            threading.Thread(target=self.run_faults, args=(started, duration_s)),
            threading.Thread(target=self.sampler),
        ]
        for thread in threads:
            thread.daemon = True
            thread.start()
        while time.monotonic() - started < duration_s:
            time.sleep(10)
            print(f"  {time.monotonic() - started:5.0f} s: {self.progress()}", flush=True)
        threads[1].join(timeout=120)  # the last fault done
        drained = self.drain(self.args.drain_s)
        self.stop.set()
        codes = self.fleet.stop(timeout_s=60)
        time.sleep(2)
        left = [p.pid for p in stack_processes(self.state_dir)]
        return self.report(log, drained, codes, left, time.monotonic() - started)

    def progress(self) -> str:
        with contextlib.suppress(Exception), self.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT status, count(*) FROM jobs GROUP BY 1")).all()
            return (
                ", ".join(f"{s} {c}" for s, c in sorted(rows))
                + f"; faults {dict(self.figures.faults)}"
            )
        return "database not answering"

    def drain(self, limit_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < limit_s:
            with contextlib.suppress(Exception), self.engine.connect() as conn:
                unfinished = conn.execute(
                    sa.text("SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed')")
                ).scalar_one()
                if unfinished == 0:
                    return time.monotonic() - started
            time.sleep(2)
        return -1.0

    def report(
        self, log: RequestLog, drained_s: float, codes: dict[str, int | None], left: list[int],
        took_s: float,
    ) -> dict[str, Any]:  # fmt: skip
        with self.engine.connect() as conn:
            jobs = conn.execute(
                sa.text(
                    "SELECT id, kind, status, attempts, releases, page_releases, claims,"
                    " lock_key, last_error FROM jobs"
                )
            ).all()
            completions: dict[int, int] = dict(
                conn.execute(
                    sa.text(
                        "SELECT job_id, count(*) FROM job_events WHERE to_status = 'completed'"
                        " GROUP BY job_id"
                    )
                ).all()
            )
        by_status = Counter(job.status for job in jobs)
        unfinished = [job.id for job in jobs if job.status not in ("completed", "failed")]
        failed = [f"{job.id} {job.kind}: {(job.last_error or '')[:160]}" for job in jobs
                  if job.status == "failed"]  # fmt: skip
        charged = [f"{job.id} {job.kind} attempts={job.attempts}: {(job.last_error or '')[:160]}"
                   for job in jobs if job.status == "completed" and job.attempts > 1]  # fmt: skip
        twice = [job_id for job_id, count in completions.items() if count > 1]
        overlaps = lock_overlaps(log)
        # Processes that ignored SIGTERM and were SIGKILLed exit -9; a clean exit is 0.
        unclean = {name: code for name, code in codes.items() if code != 0}
        figures = {
            "minutes": self.args.minutes,
            "took_s": round(took_s),
            "jobs": len(jobs),
            "by_kind": dict(Counter(job.kind for job in jobs)),
            "lock_keyed": sum(1 for job in jobs if job.lock_key),
            "by_status": dict(by_status),
            "lost": len(unfinished),
            "completed_twice": len(twice),
            "lock_overlaps": len(overlaps),
            "cap_breaches": len(self.figures.processing_breaches)
            + len(self.figures.browser_breaches),
            "failed": failed,
            "charged_an_attempt": charged,
            "releases": sum(job.releases for job in jobs),
            "page_releases": sum(job.page_releases for job in jobs),
            "jobs_with_page_releases": sum(1 for job in jobs if job.page_releases),
            "most_releases_of_a_job": max((job.releases for job in jobs), default=0),
            "faults": dict(self.figures.faults),
            "leader_takeover_s": [round(t, 2) for t in self.figures.takeovers_s],
            "pg_restart_s": [round(t, 2) for t in self.figures.pg_restarts_s],
            "most_processing_on_a_host": self.figures.most_processing,
            "most_browsers_on_a_host": self.figures.most_browsers,
            "drained_after_s": round(drained_s),
            "exit_codes_not_0": unclean,
            "stack_processes_left": left,
        }
        if overlaps:
            figures["overlap_examples"] = overlaps[:5]
        if self.figures.processing_breaches or self.figures.browser_breaches:
            figures["breach_examples"] = (
                self.figures.processing_breaches + self.figures.browser_breaches
            )[:5]
        return figures


def lock_overlaps(log: RequestLog) -> list[str]:
    """Requests of one lock key (jobs named K<n>-<serial>) that overlapped in the site's log."""
    now = time.monotonic()
    with log.lock:
        spans = [
            (r.job.split("-")[0], r.job, r.started, now if r.ended is None else r.ended)
            for r in log.requests
            if r.job.startswith("K")
        ]
    found = []
    for i, (key, job, start, end) in enumerate(spans):
        for other_key, other_job, other_start, other_end in spans[i + 1 :]:
            if key == other_key and start < other_end and other_start < end:
                found.append(
                    f"{job} and {other_job} ({min(end, other_end) - max(start, other_start):.2f} s)"
                )
    return found


def held(figures: dict[str, Any]) -> bool:
    return (
        figures["lost"] == 0
        and figures["completed_twice"] == 0
        and figures["lock_overlaps"] == 0
        and figures["cap_breaches"] == 0
        and not figures["failed"]
        and not figures["charged_an_attempt"]
        and not figures["exit_codes_not_0"]
        and not figures["stack_processes_left"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="how long the faults go on")
    parser.add_argument("--jobs-per-minute", type=float, default=100.0)
    parser.add_argument("--rescue-after-s", type=float, default=20.0)
    parser.add_argument("--drain-s", type=float, default=300.0, help="wait this long at most")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="storm-", dir="/tmp"))
    cluster = f"storm{os.getpid()}"
    print(f"storm: {args.minutes:g} min, seed {args.seed}, logs in {work}", flush=True)
    try:
        with own_cluster(cluster) as url, request_log_site() as (base, log):
            storm = Storm(args, work, url, cluster)
            try:
                figures = storm.run(base, log)
            finally:
                storm.stop.set()
                storm.fleet.stop(timeout_s=30)
                storm.engine.dispose()
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    print(json.dumps(figures, indent=1))
    ok = held(figures)
    print("storm: everything held" if ok else "storm: SOMETHING BROKE", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
