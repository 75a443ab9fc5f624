"""Helpers for the producer's tests: hosts, stand-in consumers, producer processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import PRODUCER_ADVISORY_LOCK_KEY
from scrapefleet.common.runtime.metrics import (
    PRODUCER_REGISTRY,
    FleetSnapshot,
    publish_fleet_snapshot,
)
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.status.document import write_status
from scrapefleet.common.store import HostSpec, NewJob
from tests.host_status_factory import status_for

GIB = 1024**3
T = TypeVar("T")
PRODUCER_BIN = Path(sys.executable).parent / "scrapefleet-producer"


def producer_settings(database_url: str, state_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "state_dir": state_dir,
        "producer_interval_s": 0.2,
        "wake_debounce_s": 0.0,
    }
    return load_settings(**(values | overrides))


def add_hosts(engine: Engine, capacities: dict[str, int]) -> None:
    with engine.begin() as conn:
        for name, capacity in capacities.items():
            store.add_host(conn, HostSpec(name=name, capacity=capacity))


def publish_status(
    state_dir: Path,
    name: str,
    *,
    running: int = 0,
    state: str = "active",
    available_bytes: int = 8 * GIB,
    age_s: float = 0.0,
) -> None:
    """What a live consumer on this machine writes for the local probe."""
    write_status(
        state_dir,
        status_for(
            name,
            running=running,
            state=state,
            boot_id="boot-1",
            memory_available_bytes=available_bytes,
            memory_total_bytes=16 * GIB,
            updated_at=time.time() - age_s,
        ),
    )


def submit(engine: Engine, jobs: Sequence[NewJob]) -> list[int]:
    with engine.begin() as conn:
        return store.insert_jobs(conn, jobs, default_max_attempts=3).ids


def statuses(engine: Engine) -> dict[int, tuple[str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, status, host FROM jobs ORDER BY id"))
        return {r.id: (r.status, r.host) for r in rows}


def in_flight_per_host(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT host, count(*) AS n FROM jobs"
                " WHERE status IN ('queued', 'processing') GROUP BY host"
            )
        )
        return {r.host: r.n for r in rows}


def count_status(engine: Engine, status: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE status = :s"), {"s": status}
        ).scalar_one()


def host_state(engine: Engine, name: str) -> str:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT state FROM hosts WHERE name = :n"), {"n": name}
        ).scalar_one()


def leader_application(engine: Engine) -> str | None:
    """application_name of the session holding the producer lock in this database."""
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0"
                " AND l.objid::bigint = :key AND l.objsubid = 1"
                " AND l.database = (SELECT oid FROM pg_database"
                "   WHERE datname = current_database())"
            ),
            {"key": PRODUCER_ADVISORY_LOCK_KEY},
        ).scalar()


def leader_pid(engine: Engine) -> int | None:
    """The OS pid of the producer process holding the lock, from its application_name."""
    name = leader_application(engine)
    return int(name.rsplit("-", 1)[1]) if name else None


def start_producer_process(
    database_url: str, state_dir: Path, log: Path, *args: str
) -> subprocess.Popen[bytes]:
    """``scrapefleet-producer`` with a short interval, its output appended to ``log``."""
    env = os.environ | {
        "SCRAPEFLEET_DATABASE_URL": database_url,
        "SCRAPEFLEET_STATE_DIR": str(state_dir),
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.2",
    }
    with log.open("ab") as out:
        return subprocess.Popen([str(PRODUCER_BIN), *args], env=env, stdout=out, stderr=out)


def kill_processes(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5)


def exported_samples(
    snapshot: FleetSnapshot, prefix: str, label: str
) -> dict[tuple[str, str | None], float]:
    """Publish ``snapshot`` and read the producer's endpoint text back: (sample name, its
    ``label``) -> value, for the samples whose name starts with ``prefix``."""
    publish_fleet_snapshot(snapshot)
    return {
        (sample.name, sample.labels.get(label)): sample.value
        for family in text_string_to_metric_families(generate_latest(PRODUCER_REGISTRY).decode())
        for sample in family.samples
        if sample.name.startswith(prefix)
    }
