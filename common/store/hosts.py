"""Host rows: provisioning and registration, state changes, and an operator's host commands.

Every state change goes through set_host_state, which records it in host_events; the moves the
actors make are rows of statuses.TRANSITIONS.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound, SubmitError
from scrapefleet.common.store.events import record_host_event
from scrapefleet.common.store.records import HostSpec, Registration
from scrapefleet.common.store.releases import requeue_host_queued
from scrapefleet.common.store.statuses import HostState, JobStatus

__all__ = [
    "ADD_HOST_SQL",
    "SET_HOST_STATE_SQL",
    "add_host",
    "drain_host",
    "enable_host",
    "offline_after_own_drain",
    "reactivate_after_own_drain",
    "register_consumer",
    "remove_host",
    "set_host_state",
]

# Create, or update the settings of a host that exists (so provisioning can re-run). How the
# producer reaches it goes to host_access, which no consumer role may write.
ADD_HOST_SQL = sa.text(
    "INSERT INTO hosts AS h (name, capacity) VALUES (:name, :capacity)"
    " ON CONFLICT (name) DO UPDATE SET capacity = EXCLUDED.capacity"
    " RETURNING (xmax = 0) AS created"
)
SET_HOST_ACCESS_SQL = sa.text(
    "INSERT INTO host_access (host, address, ssh_port, ssh_user, ssh_key_file, known_hosts_file)"
    " VALUES (:name, :address, :ssh_port, :ssh_user, :ssh_key_file, :known_hosts_file)"
    " ON CONFLICT (host) DO UPDATE SET address = EXCLUDED.address,"
    " ssh_port = EXCLUDED.ssh_port, ssh_user = EXCLUDED.ssh_user,"
    " ssh_key_file = EXCLUDED.ssh_key_file, known_hosts_file = EXCLUDED.known_hosts_file"
)
# A consumer creating its own row at its first start: no access row (a local probe until an
# operator adds one), and nothing a consumer's role may not write.
REGISTER_NEW_HOST_SQL = sa.text(
    "INSERT INTO hosts (name, capacity) VALUES (:name, :capacity)"
    " ON CONFLICT (name) DO NOTHING RETURNING name"
)
LOCK_HOST_SQL = sa.text(
    "SELECT state, state_reason, boot_id FROM hosts WHERE name = :name FOR UPDATE"
)
# A new boot id resets the since-boot counter.
REGISTER_SQL = sa.text(
    "UPDATE hosts SET boot_id = :boot_id, heartbeat_at = now(),"
    " jobs_since_boot = CASE WHEN boot_id IS DISTINCT FROM :boot_id"
    "   THEN 0 ELSE jobs_since_boot END"
    " WHERE name = :name"
    " RETURNING capacity, state, jobs_since_restart, jobs_since_boot"
)
SET_HOST_STATE_SQL = sa.text(
    "WITH old AS (SELECT name, state FROM hosts WHERE name = :name FOR UPDATE)"
    " UPDATE hosts h SET state = :to_state, state_reason = :reason,"
    "   state_changed_at = now()"
    " FROM old WHERE h.name = old.name AND old.state <> :to_state"
    "   AND (CAST(:expected AS text[]) IS NULL"
    "        OR old.state = ANY(CAST(:expected AS text[])))"
    " RETURNING old.state AS from_state"
)
CLEAR_PROBE_FAILURES_SQL = sa.text(
    "UPDATE hosts SET probe_failures = 0, last_probe_error = NULL WHERE name = :name"
)
COUNT_RUNNING_SQL = sa.text(
    f"SELECT count(*) FROM jobs WHERE host = :name AND status = '{JobStatus.PROCESSING}'"
)
DELETE_HOST_SQL = sa.text("DELETE FROM hosts WHERE name = :name")
HOST_EXISTS_SQL = sa.text("SELECT 1 FROM hosts WHERE name = :name")

# States a consumer's start leaves alone: an operator chose them.
_OPERATOR_CHOSEN = (HostState.DRAINING, HostState.DISABLED)


def add_host(conn: Connection, spec: HostSpec) -> bool:
    """Create the host, or update its settings if it exists (so provisioning can re-run).
    Returns True when it was created."""
    created = conn.execute(ADD_HOST_SQL, spec.__dict__).scalar_one()
    conn.execute(SET_HOST_ACCESS_SQL, spec.__dict__)
    if created:
        record_host_event(conn, spec.name, "added", to_state=HostState.ACTIVE)
    return bool(created)


def register_consumer(conn: Connection, name: str, capacity: int, boot_id: str) -> Registration:
    """A consumer starting up: create its host row if new. A new boot id resets the since-boot
    counter. Its state becomes active unless an operator drained or disabled it."""
    if conn.execute(LOCK_HOST_SQL, {"name": name}).first() is None:
        params = {"name": name, "capacity": capacity}
        if conn.execute(REGISTER_NEW_HOST_SQL, params).first() is not None:
            record_host_event(conn, name, "added", to_state=HostState.ACTIVE)
    row = conn.execute(REGISTER_SQL, {"name": name, "boot_id": boot_id}).one()
    state = row.state
    if state not in _OPERATOR_CHOSEN:
        set_host_state(conn, name, HostState.ACTIVE, "consumer started")
        state = HostState.ACTIVE.value
    return Registration(row.capacity, state, row.jobs_since_restart, row.jobs_since_boot)


def set_host_state(
    conn: Connection,
    name: str,
    to_state: str,
    reason: str | None = None,
    *,
    expected: Sequence[str] | None = None,
) -> bool:
    """Move a host to ``to_state`` (only from one of ``expected`` when given), recording the
    change in host_events. Returns False when nothing changed."""
    params = {
        "name": name,
        "to_state": str(to_state),
        "reason": reason,
        "expected": [str(s) for s in expected] if expected else None,
    }
    row = conn.execute(SET_HOST_STATE_SQL, params).first()
    if row is None:
        return False
    record_host_event(
        conn, name, "state", from_state=row.from_state, to_state=to_state, message=reason
    )
    return True


def reactivate_after_own_drain(conn: Connection, name: str, own_reason: str) -> bool:
    """A consumer killed while draining for its own shutdown left its host 'draining' under
    ``own_reason``; when it starts again the host is active again. A drain by an operator has
    another reason and stays. Returns True when the host was reactivated."""
    row = conn.execute(LOCK_HOST_SQL, {"name": name}).first()
    if row is None or row.state != HostState.DRAINING or row.state_reason != own_reason:
        return False
    return set_host_state(
        conn, name, HostState.ACTIVE, "consumer restarted", expected=[HostState.DRAINING]
    )


def offline_after_own_drain(conn: Connection, name: str, own_reason: str, reason: str) -> bool:
    """A consumer that drained its host for its own shutdown leaves it offline. A drain by an
    operator (another reason) stays: the host must not take work when its consumer comes back.
    Returns True when the host went offline."""
    row = conn.execute(LOCK_HOST_SQL, {"name": name}).first()
    if row is None or row.state != HostState.DRAINING or row.state_reason != own_reason:
        return False
    return set_host_state(conn, name, HostState.OFFLINE, reason, expected=[HostState.DRAINING])


def drain_host(conn: Connection, name: str, reason: str = "drained by operator") -> list[int]:
    """No new work for the host; its queued jobs go back to pending for the others. Jobs it is
    running finish there."""
    require_host(conn, name)
    set_host_state(conn, name, HostState.DRAINING, reason)
    return requeue_host_queued(conn, name, f"requeued: host {name} draining")


def enable_host(conn: Connection, name: str) -> bool:
    require_host(conn, name)
    conn.execute(CLEAR_PROBE_FAILURES_SQL, {"name": name})
    return set_host_state(conn, name, HostState.ACTIVE, "enabled by operator")


def remove_host(conn: Connection, name: str) -> None:
    """Remove a host that runs nothing; its queued jobs go back to pending first."""
    require_host(conn, name)
    running = conn.execute(COUNT_RUNNING_SQL, {"name": name}).scalar_one()
    if running:
        raise SubmitError(f"host {name!r} is running {running} job(s): drain it and wait first")
    requeue_host_queued(conn, name, f"requeued: host {name} removed")
    conn.execute(DELETE_HOST_SQL, {"name": name})
    record_host_event(conn, name, "removed")


def require_host(conn: Connection, name: str) -> None:
    if conn.execute(HOST_EXISTS_SQL, {"name": name}).first() is None:
        raise NotFound(f"no host named {name!r}")
