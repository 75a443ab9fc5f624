"""The fleet through a real PgBouncer in transaction pooling: two consumers do their work
through it (one direct LISTEN connection each), the producer connects directly; every job
completes exactly once, and the connections each daemon holds are counted."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from scrapefleet.common import store
from scrapefleet.common.db.engines import libpq_url
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, NewJob
from tests.e2e.test_local_fleet import FAST, completions_per_job, scalar, stopped_after
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PGBOUNCER = "/usr/sbin/pgbouncer"
POOL_SIZE = 4  # server connections per database and user, for all consumers together
JOBS = 240
HOSTS = ["pool-h1", "pool-h2"]
CAPACITY = 6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ini(directory: Path, server: sa.URL, port: int) -> str:
    return f"""[databases]
{server.database} = host={server.host} port={server.port or 5432} dbname={server.database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 200
server_reset_query =
idle_transaction_timeout = 60
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


@pytest.fixture
def pgbouncer(database_url: str) -> Iterator[tuple[str, int]]:
    """A PgBouncer of our own in front of the test database: its URL and process id."""
    if not os.path.exists(PGBOUNCER):
        pytest.skip("pgbouncer is not installed (.ci/install-fleet.sh installs it)")
    server = make_url(database_url)
    if not server.host or server.host.startswith("/"):
        pytest.skip("the test database is not on TCP (embedded pgserver)")
    port = _free_port()
    # PgBouncer refuses to run as root: as root, run it as postgres, in a directory it owns.
    directory = Path(tempfile.mkdtemp(prefix="scrapefleet-pgbouncer-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
        as_user = ["-u", "postgres"]
    (directory / "userlist.txt").write_text(f'"{server.username}" ""\n')
    (directory / "pgbouncer.ini").write_text(_ini(directory, server, port))
    process = subprocess.Popen(
        [PGBOUNCER, *as_user, str(directory / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    try:
        wait_for(lambda: _answers(url) or process.poll() is not None, 10, "pgbouncer to answer")
        assert process.poll() is None, (directory / "pgbouncer.log").read_text()
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        shutil.rmtree(directory, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        psycopg.connect(libpq_url(url), connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def _backends(engine: Engine, pooler_pid: int | None) -> dict[str, int]:
    """Backends on the test database: the pooler's server connections as "pgbouncer" (they
    carry the application_name of whichever client used them last), the others by their
    application_name; this test's own left out. The pooler's ports are read before and after
    the backends: a server connection it opens in between is still its own."""

    def ports() -> set[int]:
        if pooler_pid is None:
            return set()
        connections = psutil.Process(pooler_pid).net_connections("tcp")
        return {c.laddr.port for c in connections if c.raddr}

    pooler_ports = ports()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT application_name, client_port FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).all()
    pooler_ports |= ports()
    counts: dict[str, int] = {}
    for name, port in rows:
        key = "pgbouncer" if port in pooler_ports else name
        counts[key] = counts.get(key, 0) + 1
    return counts


def _run_fleet(
    engine: Engine,
    database_url: str,
    consumer_env: dict[str, str],
    pooler_pid: int | None,
    state: Path,
) -> dict[str, int]:
    """A producer (direct) and two consumers (``consumer_env``) through JOBS no-op jobs; every
    job completed exactly once. Returns the peak backends seen per name (see _backends)."""
    with engine.begin() as conn:
        for name in HOSTS:
            store.add_host(conn, HostSpec(name=name, capacity=CAPACITY))
        ids = store.insert_jobs(
            conn, [NewJob("noop", {"sleep_s": 0.01}) for _ in range(JOBS)], default_max_attempts=3
        ).ids
    engine.dispose()  # the test's own pool out of the count below
    fleet = LocalFleet(database_url, state, HOSTS, env=FAST)
    peak: dict[str, int] = {}

    def sample() -> None:
        for name, count in _backends(engine, pooler_pid).items():
            peak[name] = max(peak.get(name, 0), count)

    with stopped_after(fleet):
        for host in HOSTS:
            fleet.start_consumer(host, consumer_env)
        fleet.start_producer()
        wait_for(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'completed'") == JOBS,
            90,
            f"{JOBS} jobs completed",
            between=sample,
            poll_s=0.2,
        )
    assert completions_per_job(engine) == dict.fromkeys(ids, 1)
    print(f"\npeak backends per name: {peak}")
    return peak


@pytest.mark.parametrize("listen", [True, False], ids=["direct-listen", "poll-only"])
def test_fleet_through_pgbouncer_completes_every_job_once(
    engine: Engine,
    database_url: str,
    pgbouncer: tuple[str, int],
    tmp_path: Path,
    listen: bool,
) -> None:
    pgbouncer_url, pooler_pid = pgbouncer
    pooled = {"SCRAPEFLEET_DATABASE_URL": pgbouncer_url, "SCRAPEFLEET_DATABASE_POOLER": "pgbouncer"}
    if listen:
        pooled["SCRAPEFLEET_LISTEN_DATABASE_URL"] = database_url
    peak = _run_fleet(engine, database_url, pooled, pooler_pid, tmp_path / "state")
    # Each consumer's only direct connection is its LISTEN, if any; its work shares the
    # pooler's few server connections.
    for host in HOSTS:
        assert peak.get(f"scrapefleet-consumer {host} listen") == (1 if listen else None), peak
        assert f"scrapefleet-consumer {host}" not in peak, peak
    assert 1 <= peak.get("pgbouncer", 0) <= POOL_SIZE, peak


@pytest.mark.parametrize("wakeup", ["listen", "poll"])
def test_direct_fleet_connections_for_comparison(
    engine: Engine, database_url: str, tmp_path: Path, wakeup: str
) -> None:
    """Direct, as by default, and direct with consumer_wakeup = poll: no LISTEN connection,
    every job still done once, on the claim poll."""
    env = {"SCRAPEFLEET_CONSUMER_WAKEUP": wakeup}
    peak = _run_fleet(engine, database_url, env, None, tmp_path / "state")
    for host in HOSTS:
        listening = 1 if wakeup == "listen" else None
        assert peak.get(f"scrapefleet-consumer {host} listen") == listening, peak
        # The connection it holds for claims and completions (consumer.serving), and its
        # engine's: pool_size 2 plus as many again in overflow (consumer/__main__.py).
        assert 1 <= peak.get(f"scrapefleet-consumer {host}", 0) <= 5, peak
