"""A whole scrapefleet on the fleet harness: real consumer daemons inside the hosts, a real
producer in this process probing them over SSH, PostgreSQL on a Unix socket.

The database is an embedded pgserver: its Unix socket lives on the shared filesystem, so the
consumers inside the network namespaces reach it without a server listening on the bridge.
Each host's sshd forces the product's own answer (common.status.answer: the host's clock, then
``cat`` of that host's status file), exactly what the Ansible role's authorized_keys line does.

Everything started here is ended by ``SchedulingFleet.close`` (consumers by PID, through the
harness, which also tears down sshd and the namespaces).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.status.answer import status_answer_command
from scrapefleet.common.status.document import parse_status, status_path
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.fleet.harness import Fleet, FleetHost
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
CONSUMER_BIN = BIN / "scrapefleet-consumer"
CAPACITY = 3
STALE_STATUS_S = 4.0  # a status document this old is a failed probe (consumer dead)
CONSUMER_STOP_S = 10.0  # SIGTERM drains in-flight noop jobs (< 2 s), then SIGKILL
T = TypeVar("T")

# Short periods so that a failure is seen within a second or two (see SchedulingFleet).
CONSUMER_ENV = {
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    "SCRAPEFLEET_HEARTBEAT_S": "0.5",
    "SCRAPEFLEET_RESTART_EVERY": "0",  # noop jobs need no browser stack
    "SCRAPEFLEET_REBOOT_EVERY": "0",
    "SCRAPEFLEET_BACKOFF_BASE_S": "0",
}


class SchedulingFleet:
    """Database rows, consumers and the producer over ``fleet``'s hosts."""

    def __init__(self, fleet: Fleet, database_url: str, work_dir: Path) -> None:
        self.fleet = fleet
        self.database_url = database_url
        self.work_dir = work_dir
        self.engine: Engine = make_engine(database_url, pool_size=4)
        self.consumers: dict[str, subprocess.Popen[bytes]] = {}
        self.producer: Producer | None = None

    # -- setup --------------------------------------------------------------------------

    def reset(self) -> None:
        """Healthy hosts, empty tables, host rows (SSH settings but no key file: that comes
        from the producer's settings, the fallback production uses)."""
        self.fleet.reset()
        with self.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE jobs, hosts, job_events, host_events RESTART IDENTITY"))
            for host in self.fleet.hosts.values():
                spec = HostSpec(
                    name=host.name,
                    capacity=CAPACITY,
                    address=host.address,
                    ssh_port=host.port,
                    ssh_user=self.fleet.user,
                )
                store.add_host(conn, spec)
        for host in self.fleet.hosts.values():
            self.use_status_command(host)
            self.write_boot_id(host)

    def state_dir(self, host: FleetHost) -> Path:
        return host.dir / "state"

    def use_status_command(self, host: FleetHost) -> None:
        """The forced command is the product's answer, as in production."""
        host.set_forced_command(status_answer_command(status_path(self.state_dir(host), host.name)))

    def write_boot_id(self, host: FleetHost) -> str:
        """A new boot id, as the kernel gives after a reboot."""
        boot_id = str(uuid.uuid4())
        (host.dir / "boot_id").write_text(boot_id + "\n")
        return boot_id

    def start_consumer(self, host: FleetHost) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
        env |= CONSUMER_ENV | {
            "SCRAPEFLEET_DATABASE_URL": self.database_url,
            "SCRAPEFLEET_STATE_DIR": str(self.state_dir(host)),
            "SCRAPEFLEET_ARTIFACTS_DIR": str(host.dir / "artifacts"),
            "SCRAPEFLEET_BOOT_ID_FILE": str(host.dir / "boot_id"),
        }
        with open(host.dir / "consumer.log", "ab") as log:
            process = host.popen(
                [str(CONSUMER_BIN), "run", "--host", host.name],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.consumers[host.name] = process
        return process

    def start_consumers(self) -> None:
        for host in self.fleet.hosts.values():
            self.start_consumer(host)
        for host in self.fleet.hosts.values():
            wait_for(lambda h=host: self.status_is_fresh(h), 20, f"consumer on {host.name} up")

    def status_is_fresh(self, host: FleetHost) -> bool:
        """The consumer has written an active status document within the last second."""
        done = host.run(
            [str(CONSUMER_BIN), "status", "--json", "--host", host.name],
            env={
                "SCRAPEFLEET_STATE_DIR": str(self.state_dir(host)),
                "SCRAPEFLEET_LOCAL_STATE_STALE_S": "1",
            },
        )
        return done.returncode == 0 and parse_status(done.stdout).state == "active"

    def producer_settings(self) -> Settings:
        return load_settings(
            database_url=self.database_url,
            state_dir=self.work_dir / "producer",
            producer_interval_s=0.3,
            # Room for a CI machine shared with browser tests: two slow rounds would take a
            # healthy host offline. Failures under test here are fast (refused, bad key,
            # garbage).
            probe_timeout_s=5.0,
            local_state_stale_s=STALE_STATUS_S,
            probe_failures_offline=2,
            # Hosts broken from the start go offline as fast as those broken later.
            probe_start_grace_s=0,
            offline_grace_s=1.0,
            # Longer than a consumer's restart under load: the restarted consumer, not the
            # heartbeat rescue, must be what recovers the jobs of a killed one.
            rescue_after_s=20.0,
            wake_debounce_s=0.0,
            ssh_key_file=self.fleet.client_key,
            ssh_known_hosts_file=self.fleet.known_hosts,
            ssh_reconnect_base_s=0.2,
            ssh_reconnect_max_s=1.0,
        )

    def start_producer(self) -> Producer:
        self.producer = Producer(self.producer_settings(), self.engine)
        self.producer.start()
        return self.producer

    # -- teardown -----------------------------------------------------------------------

    def stop_daemons(self) -> None:
        if self.producer is not None:
            self.producer.stop()
            self.producer = None
        running = [p for p in self.consumers.values() if p.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a frozen one must see its SIGTERM
                os.kill(process.pid, signal.SIGTERM)
        for process in running:
            try:
                process.wait(CONSUMER_STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(CONSUMER_STOP_S)
        self.consumers.clear()

    def close(self) -> None:
        try:
            self.stop_daemons()
        finally:
            self.engine.dispose()

    # -- jobs and what SQL says ---------------------------------------------------------

    def submit(self, count: int, sleep_s: float) -> list[int]:
        jobs = [NewJob(kind="noop", payload={"sleep_s": sleep_s}) for _ in range(count)]
        with self.engine.begin() as conn:
            return store.insert_jobs(conn, jobs, default_max_attempts=3).ids

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def host_row(self, name: str) -> Any:
        return self.rows("SELECT * FROM hosts WHERE name = :name", name=name)[0]

    def all_completed(self, ids: Sequence[int]) -> bool:
        done = self.rows(
            "SELECT count(*) AS n FROM jobs WHERE id = ANY(:ids) AND status = 'completed'",
            ids=list(ids),
        )
        return bool(done[0].n == len(ids))

    def completions_per_job(self, ids: Sequence[int]) -> dict[int, int]:
        """How many times the audit trail saw each job reach 'completed'."""
        rows = self.rows(
            "SELECT j.id, count(e.id) FILTER (WHERE e.to_status = 'completed') AS n"
            " FROM jobs j LEFT JOIN job_events e ON e.job_id = j.id"
            " WHERE j.id = ANY(:ids) GROUP BY j.id",
            ids=list(ids),
        )
        return {r.id: r.n for r in rows}

    def completed_by_host(self, ids: Sequence[int]) -> dict[str, int]:
        rows = self.rows(
            "SELECT host, count(*) AS n FROM jobs WHERE id = ANY(:ids) AND status = 'completed'"
            " GROUP BY host",
            ids=list(ids),
        )
        return {r.host: r.n for r in rows}

    def host_events(self, name: str) -> list[Any]:
        return self.rows(
            "SELECT event, from_state, to_state, message, at FROM host_events"
            " WHERE host = :name ORDER BY id",
            name=name,
        )

    def assert_each_completed_once(self, ids: Sequence[int]) -> None:
        counts = self.completions_per_job(ids)
        assert len(counts) == len(ids), "jobs lost"
        twice = {job: n for job, n in counts.items() if n != 1}
        assert not twice, f"jobs not completed exactly once: {twice}"
