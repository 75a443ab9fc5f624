"""Host rows: provisioning and registration, state changes, and an operator's host commands.

Every state change goes through set_host_state, which records it in host_events; the moves the
actors make are rows of statuses.TRANSITIONS.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common.errors import (
    HostBusy,
    HostOffline,
    NotFound,
    ScrapefleetError,
    SubmitError,
)
from scrapefleet.common.store.consuming.releases import requeue_host_queued
from scrapefleet.common.store.events import record_host_event
from scrapefleet.common.store.records import HostSpec, Registration
from scrapefleet.common.store.sql_text import statement
from scrapefleet.common.store.statuses import HostState

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
ADD_HOST_SQL = statement(
    """
INSERT INTO hosts AS h (name, capacity) VALUES (:name, :capacity)
ON CONFLICT (name) DO UPDATE SET capacity = EXCLUDED.capacity
RETURNING (xmax = 0) AS created
"""
)
SET_HOST_ACCESS_SQL = statement(
    """
INSERT INTO host_access (host, address, ssh_port, ssh_user, ssh_key_file, known_hosts_file)
VALUES (:name, :address, :ssh_port, :ssh_user, :ssh_key_file, :known_hosts_file)
ON CONFLICT (host) DO UPDATE SET
  address = EXCLUDED.address, ssh_port = EXCLUDED.ssh_port, ssh_user = EXCLUDED.ssh_user,
  ssh_key_file = EXCLUDED.ssh_key_file, known_hosts_file = EXCLUDED.known_hosts_file
"""
)
# A consumer's writes to its own row go through functions (migration 0017) that let its role
# make only a consumer's moves, with its own row's bounds; the producer and the owner call them
# unrestricted. A consumer creating its own row at its first start: no access row (a local
# probe until an operator adds one). A new boot id resets the since-boot counter.
REGISTER_SQL = statement(
    """
SELECT capacity, state, jobs_since_restart, jobs_since_boot, created
FROM host_register(:name, :capacity, :boot_id)
"""
)
# The state moved out of, or NULL when nothing moved (with skip_locked: also when another
# session holds the row, as a consumer may for as long as it likes).
SET_HOST_STATE_SQL = statement(
    """
SELECT host_set_state(:name, :to_state, :reason, CAST(:expected AS text[]), :skip_locked)
  AS from_state
"""
)
CLEAR_PROBE_FAILURES_SQL = statement(
    """
UPDATE hosts SET probe_failures = 0, last_probe_error = NULL WHERE name = :name
"""
)
DELETE_HOST_SQL = statement("DELETE FROM hosts WHERE name = :name")

# An operator's command waits this long for a row another session holds, then says so.
OPERATOR_LOCK_TIMEOUT = "3s"
LOCK_HOST_FOR_OPERATOR_SQL = statement("SELECT 1 FROM hosts WHERE name = :name FOR NO KEY UPDATE")
LOCK_TIMEOUT_SQL = statement("SELECT current_setting('lock_timeout')")
SET_LOCK_TIMEOUT_SQL = statement("SELECT set_config('lock_timeout', :timeout, true)")

# Reads.
READ_HOST_STATE_SQL = statement("SELECT state, state_reason FROM hosts WHERE name = :name")
HOST_EXISTS_SQL = statement("SELECT 1 FROM hosts WHERE name = :name")
COUNT_RUNNING_SQL = statement(
    """
SELECT count(*) FROM jobs WHERE host = :name AND status = {job.processing}
"""
)
COUNT_QUEUED_SQL = statement(
    """
SELECT count(*) FROM jobs WHERE host = :name AND status = {job.queued}
"""
)

LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE lock_not_available (lock_timeout, NOWAIT)

# States a consumer's start leaves alone: an operator chose them.
_OPERATOR_CHOSEN = (HostState.DRAINING, HostState.DISABLED)


def add_host(conn: Connection, spec: HostSpec) -> bool:
    """Create the host, or update its settings if it exists (so provisioning can re-run).
    Returns True when it was created."""
    _take_row_for_operator(conn, spec.name)  # an existing row its consumer holds: HostBusy
    created = conn.execute(ADD_HOST_SQL, spec.__dict__).scalar_one()
    conn.execute(SET_HOST_ACCESS_SQL, spec.__dict__)
    if created:
        record_host_event(conn, spec.name, "added", to_state=HostState.ACTIVE)
    return bool(created)


def register_consumer(conn: Connection, name: str, capacity: int, boot_id: str) -> Registration:
    """A consumer starting up: create its host row if new. A new boot id resets the since-boot
    counter. Its state becomes active unless an operator drained or disabled it."""
    params = {"name": name, "capacity": capacity, "boot_id": boot_id}
    row = conn.execute(REGISTER_SQL, params).one()
    if row.created:
        record_host_event(conn, name, "added", to_state=HostState.ACTIVE)
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
    skip_locked: bool = False,
) -> bool:
    """Move a host to ``to_state`` (only from one of ``expected`` when given), recording the
    change in host_events. Returns False when nothing changed. ``skip_locked``: nothing changes
    either when another session holds the row (the producer: that host waits for next cycle).
    A consumer's role may make only a consumer's moves of its own row (the database refuses
    the rest: never out of an operator's drain or disable)."""
    params = {
        "name": name,
        "to_state": str(to_state),
        "reason": reason,
        "expected": [str(s) for s in expected] if expected else None,
        "skip_locked": skip_locked,
    }
    row = conn.execute(SET_HOST_STATE_SQL, params).one()
    if row.from_state is None:
        return False
    record_host_event(
        conn, name, "state", from_state=row.from_state, to_state=to_state, message=reason
    )
    return True


def reactivate_after_own_drain(conn: Connection, name: str, own_reason: str) -> bool:
    """A consumer killed while draining for its own shutdown left its host 'draining' under
    ``own_reason``; when it starts again the host is active again. A drain by an operator has
    another reason and stays. Returns True when the host was reactivated."""
    row = conn.execute(READ_HOST_STATE_SQL, {"name": name}).first()
    if row is None or row.state != HostState.DRAINING or row.state_reason != own_reason:
        return False
    return set_host_state(
        conn, name, HostState.ACTIVE, "consumer restarted", expected=[HostState.DRAINING]
    )


def offline_after_own_drain(conn: Connection, name: str, own_reason: str, reason: str) -> bool:
    """A consumer that drained its host for its own shutdown leaves it offline. A drain by an
    operator (another reason) stays: the host must not take work when its consumer comes back.
    Returns True when the host went offline."""
    row = conn.execute(READ_HOST_STATE_SQL, {"name": name}).first()
    if row is None or row.state != HostState.DRAINING or row.state_reason != own_reason:
        return False
    return set_host_state(conn, name, HostState.OFFLINE, reason, expected=[HostState.DRAINING])


def drain_host(conn: Connection, name: str, reason: str = "drained by operator") -> list[int]:
    """No new work for the host; its queued jobs go back to pending for the others. Jobs it is
    running finish there."""
    lock_host_for_operator(conn, name)
    set_host_state(conn, name, HostState.DRAINING, reason)
    return requeue_host_queued(conn, name, f"requeued: host {name} draining")


def enable_host(conn: Connection, name: str) -> bool:
    """Let a drained, disabled, restarting or rebooting host take work again; False when it is
    active already. An offline host is refused (HostOffline): the producer's probes failed or
    its consumer stopped, and an operator's word would not make it answer; the producer makes
    it active when a probe succeeds, and its "offline since" stays true meanwhile."""
    lock_host_for_operator(conn, name)
    row = conn.execute(READ_HOST_STATE_SQL, {"name": name}).one()
    if row.state == HostState.OFFLINE:
        why = f" ({row.state_reason})" if row.state_reason else ""
        raise HostOffline(
            f"host {name} is offline{why}: it takes work again when its consumer answers the"
            " producer's probes (start it, or check `hosts`); nothing changed"
        )
    conn.execute(CLEAR_PROBE_FAILURES_SQL, {"name": name})
    enableable = [s for s in HostState if s not in (HostState.ACTIVE, HostState.OFFLINE)]
    return set_host_state(conn, name, HostState.ACTIVE, "enabled by operator", expected=enableable)


def remove_host(conn: Connection, name: str) -> None:
    """Remove a host that runs nothing; its queued jobs go back to pending first."""
    lock_host_for_operator(conn, name)
    running = conn.execute(COUNT_RUNNING_SQL, {"name": name}).scalar_one()
    if running:
        raise SubmitError(f"host {name!r} is running {running} job(s): drain it and wait first")
    requeue_host_queued(conn, name, f"requeued: host {name} removed")
    if conn.execute(COUNT_QUEUED_SQL, {"name": name}).scalar_one():
        # Held by another session (its consumer?): removed now, they would belong to no host.
        raise HostBusy(f"host {name!r} has queued jobs locked by another session: try again")
    conn.execute(DELETE_HOST_SQL, {"name": name})
    record_host_event(conn, name, "removed")


def lock_host_for_operator(conn: Connection, name: str) -> None:
    """Take the host's row for an operator's command, waiting OPERATOR_LOCK_TIMEOUT at most: a
    row its consumer holds (it may, for as long as it likes) is refused with one line, rather
    than hanging the command. NotFound when there is no such host."""
    if not _take_row_for_operator(conn, name):
        raise NotFound(f"no host named {name!r}")


def _take_row_for_operator(conn: Connection, name: str) -> bool:
    """lock_host_for_operator's lock; False when there is no such row."""
    busy = HostBusy(
        f"host {name!r} is locked by another session (its consumer?) for more than"
        f" {OPERATOR_LOCK_TIMEOUT}: try again"
    )
    with operator_waits(conn, busy):
        found = conn.execute(LOCK_HOST_FOR_OPERATOR_SQL, {"name": name}).first()
    return found is not None


@contextmanager
def operator_waits(conn: Connection, busy: ScrapefleetError) -> Iterator[None]:
    """An operator's statements inside wait OPERATOR_LOCK_TIMEOUT at most for a row another
    session holds (a host's consumer may hold its own rows as long as it likes), then ``busy``
    is raised: one line, rather than a command hanging for the session's lock_timeout."""
    previous = conn.execute(LOCK_TIMEOUT_SQL).scalar_one()
    conn.execute(SET_LOCK_TIMEOUT_SQL, {"timeout": OPERATOR_LOCK_TIMEOUT})
    try:
        yield
    except sa.exc.OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise busy from None
    conn.execute(SET_LOCK_TIMEOUT_SQL, {"timeout": previous})


def require_host(conn: Connection, name: str) -> None:
    if conn.execute(HOST_EXISTS_SQL, {"name": name}).first() is None:
        raise NotFound(f"no host named {name!r}")
