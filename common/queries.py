"""Read-only queries shared by the daemons and the CLI (writes live in common.jobstore)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.errors import NotFound


@dataclass(frozen=True)
class HostRow:
    name: str
    capacity: int
    state: str
    address: str | None
    ssh_port: int
    ssh_user: str
    ssh_key_file: str | None
    known_hosts_file: str | None
    probe_failures: int
    memory_available_bytes: int | None


def hosts(conn: Connection) -> list[HostRow]:
    rows = conn.execute(
        sa.text(
            "SELECT name, capacity, state, address, ssh_port, ssh_user, ssh_key_file,"
            " known_hosts_file, probe_failures, memory_available_bytes FROM hosts ORDER BY name"
        )
    )
    return [HostRow(**r._mapping) for r in rows]


IN_FLIGHT_BY_HOST_SQL = sa.text(
    "SELECT host, count(*) AS n FROM jobs WHERE status IN ('queued', 'processing') GROUP BY host"
)


def in_flight_by_host(conn: Connection) -> dict[str, int]:
    """Queued + processing jobs per host, as the database counts them."""
    return {r.host: r.n for r in conn.execute(IN_FLIGHT_BY_HOST_SQL)}


def busy_lock_keys(conn: Connection) -> set[str]:
    """Lock keys held by a queued or running job anywhere in the fleet."""
    rows = conn.execute(
        sa.text(
            "SELECT lock_key FROM jobs"
            " WHERE lock_key IS NOT NULL AND status IN ('queued', 'processing')"
        )
    )
    return {r.lock_key for r in rows}


def status_counts(conn: Connection) -> dict[str, int]:
    return {r.status: r.jobs for r in conn.execute(sa.text("SELECT * FROM job_status_counts"))}


def host_load(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM host_load"))]


def job(conn: Connection, job_id: int) -> dict[str, Any]:
    row = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).first()
    if row is None:
        raise NotFound(f"no job with id {job_id}")
    return dict(row._mapping)


def job_events(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.text(
            "SELECT at, from_status, to_status, host, message FROM job_events"
            " WHERE job_id = :id ORDER BY id"
        ),
        {"id": job_id},
    )
    return [dict(r._mapping) for r in rows]


def job_statuses(conn: Connection, job_ids: Sequence[int]) -> dict[int, str]:
    rows = conn.execute(
        sa.text("SELECT id, status FROM jobs WHERE id = ANY(:ids)"), {"ids": list(job_ids)}
    )
    return {r.id: r.status for r in rows}


def host_is_idle(conn: Connection, host: str) -> bool:
    """Nothing queued or processing on ``host`` and nothing pending anywhere (a pending job may
    yet be assigned here): what a consumer's run-until-idle mode waits for."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT NOT EXISTS (SELECT 1 FROM jobs WHERE host = :host"
                "   AND status IN ('queued', 'processing'))"
                " AND NOT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending')"
            ),
            {"host": host},
        ).scalar_one()
    )


def has_unfinished_jobs(conn: Connection) -> bool:
    """True while any job is pending, queued or processing (the daemons' "until idle")."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending')"
                " OR EXISTS (SELECT 1 FROM jobs WHERE status IN ('queued', 'processing'))"
            )
        ).scalar_one()
    )
