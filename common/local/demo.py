"""`scrapefleet demo`: a producer and consumer hosts process a batch of jobs end to end.

Everything it starts (embedded PostgreSQL, website, daemons) it stops again, by PID.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import click
import sqlalchemy as sa

from scrapefleet.common import store
from scrapefleet.common.api import FINISHED, Client
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.db.migrate import upgrade
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.local.demo_site import DemoSite
from scrapefleet.common.local.embedded_db import EmbeddedPostgres
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.ops.render import render_status
from scrapefleet.common.reads import queries
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import HostSpec, NewJob

# Short periods so that a few hundred jobs take seconds, not minutes.
DEMO_ENV = {
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.5",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.5",
    "SCRAPEFLEET_HEARTBEAT_S": "1",
    "SCRAPEFLEET_BACKOFF_BASE_S": "0.5",
    "SCRAPEFLEET_LOCAL_STATE_STALE_S": "10",
    # The demo's site is on loopback, which HTTP jobs may not reach unless allowed.
    "SCRAPEFLEET_HTTP_ALLOW_NETWORKS": "127.0.0.1/32",
}

SQL_TOUR = """\
Look further with SQL (psql "{url}"):
  SELECT * FROM job_status_counts;            -- how many jobs in each status
  SELECT * FROM host_load;                    -- per host: state, running, queued, done last hour
  SELECT * FROM recent_failures;              -- failed jobs: error, screenshot/html paths
  SELECT * FROM throughput_per_hour;          -- completed and failed per hour
  SELECT * FROM job_events WHERE job_id = {job_id} ORDER BY id;   -- one job's history"""


def demo_jobs(site_url: str, count: int) -> list[NewJob]:
    """Mostly good pages, some that fail once (retried), a few that always fail."""
    jobs = []
    for n in range(count):
        if n % 50 == 7:
            fields = {
                "kind": "http_get",
                "payload": {"url": f"{site_url}/broken/{n}"},
                "max_attempts": 2,
            }
        elif n % 15 == 3:
            fields = {"kind": "http_get", "payload": {"url": f"{site_url}/flaky/{n}"}}
        else:
            fields = {"kind": "http_get", "payload": {"url": f"{site_url}/page/{n}"}}
        jobs.append(validate_job(fields))
    return jobs


def run_demo(settings: Settings, *, job_count: int, host_count: int, keep_db: bool) -> int:
    embedded = None
    url = settings.database_url
    if not url:
        embedded = EmbeddedPostgres(keep=keep_db)
        click.echo(f"starting an embedded PostgreSQL in {embedded.directory} ...")
        url = embedded.start()
    state_dir = Path(tempfile.mkdtemp(prefix="scrapefleet-demo-"))
    try:
        upgrade(url)
        return _run(settings, url, state_dir, job_count, host_count)
    finally:
        if embedded is not None:
            embedded.stop()
            if keep_db:
                click.echo(f'embedded database left running: psql "{url}"')
            else:
                click.echo("(the embedded database is now removed; `--keep-db` keeps it running)")
        shutil.rmtree(state_dir, ignore_errors=True)


def _run(settings: Settings, url: str, state_dir: Path, job_count: int, host_count: int) -> int:
    hosts = [f"demo-{i + 1}" for i in range(host_count)]
    with Client(url, settings) as client, DemoSite() as site:
        with transaction(client.engine) as conn:
            for host in hosts:
                store.add_host(conn, HostSpec(name=host, capacity=settings.capacity))
                store.enable_host(conn, host)
        ids = client.submit_many(demo_jobs(site.url, job_count)).ids
        click.echo(f"submitted {len(ids)} http_get jobs against {site.url}")
        fleet = LocalFleet(url, state_dir, hosts, env=DEMO_ENV)
        click.echo(f"starting a producer and {host_count} consumer hosts ({', '.join(hosts)})")
        started = time.monotonic()
        with fleet:
            finished = _follow(client, ids, fleet, timeout_s=60 + job_count / 5)
            elapsed = time.monotonic() - started
            codes = fleet.stop()
        with client.engine.connect() as conn:
            click.echo("\n" + render_status(queries.status_counts(conn), queries.host_load(conn)))
            failed = conn.execute(
                sa.text("SELECT job_id, error FROM recent_failures LIMIT 3")
            ).all()
        click.echo(
            f"\n{finished} of {len(ids)} jobs finished in {elapsed:.1f} s; daemons exited {codes}"
        )
        for row in failed:
            click.echo(
                f"failed job {row.job_id}: {row.error}   (scrapefleet jobs show {row.job_id})"
            )
        if failed:
            _show_history(client, failed[0].job_id)
        click.echo("\n" + SQL_TOUR.format(url=url, job_id=failed[0].job_id if failed else ids[0]))
        if finished < len(ids):
            for name in fleet.processes:
                click.echo(f"\n--- {name} log ---\n{fleet.log_tail(name)}", err=True)
            return 1
        return 0


def _show_history(client: Client, job_id: int) -> None:
    """What happened to one failed job: the question an operator asks at 2am."""
    with client.engine.connect() as conn:
        events = queries.job_events(conn, job_id)
    click.echo(f"\nwhat happened to job {job_id}:")
    for e in events:
        note = f"  ({e['message']})" if e["message"] else ""
        moved = f"{e['from_status'] or '-':>10} -> {e['to_status']:<10}"
        click.echo(f"  {e['at']:%H:%M:%S.%f}  {moved} {e['host'] or ''}{note}")


def _follow(client: Client, ids: list[int], fleet: LocalFleet, timeout_s: float) -> int:
    """A progress bar until every job has finished, the deadline passes or a daemon dies."""
    deadline = time.monotonic() + timeout_s
    done = 0
    with click.progressbar(length=len(ids), label="jobs finished") as bar:
        while done < len(ids) and time.monotonic() < deadline:
            statuses = client.wait(ids, timeout_s=0)
            now_done = sum(1 for s in statuses.values() if s in FINISHED)
            bar.update(now_done - done)
            done = now_done
            dead = [n for n, p in fleet.processes.items() if p.poll() is not None]
            if dead:
                click.echo(f"\ndaemon(s) exited early: {', '.join(dead)}", err=True)
                break
            time.sleep(0.2)
    return done
