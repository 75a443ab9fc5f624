"""Read-only queries shared by the daemons and the CLI (writes live in scrapefleet.common.store)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound
from scrapefleet.common.store.records import JobFilter
from scrapefleet.common.store.sql_text import statement


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


# Its columns are HostRow's fields, in order (a test holds them to each other).
HOSTS_SQL = statement(
    """
SELECT h.name, h.capacity, h.state, a.address, coalesce(a.ssh_port, 22) AS ssh_port,
  coalesce(a.ssh_user, 'scrapefleet') AS ssh_user, a.ssh_key_file,
  a.known_hosts_file, h.probe_failures, h.memory_available_bytes
FROM hosts h LEFT JOIN host_access a ON a.host = h.name
ORDER BY h.name
"""
)


def hosts(conn: Connection) -> list[HostRow]:
    rows = conn.execute(HOSTS_SQL)
    # Positional: the columns are in HostRow's field order, and a producer of 1,000 hosts reads
    # them every wake cycle (a row's mapping costs three times the row).
    return [HostRow(*r) for r in rows]


def host(conn: Connection, name: str) -> HostRow:
    for row in hosts(conn):
        if row.name == name:
            return row
    raise NotFound(f"no host named {name!r}")


@dataclass(frozen=True)
class FleetSnapshot:
    """What an assignment starts from, read in one round trip: the operator's pause, the hosts,
    and each host's in-flight jobs (hosts with none are left out)."""

    paused: bool
    hosts: list[HostRow]
    in_flight: dict[str, int]
    browser_in_flight: dict[str, int]  # of those, jobs that need a browser


# A row per host (one row of NULL host columns when there is none), each with the pause and the
# host's in-flight count: three reads of every producer cycle in one statement. The host
# columns are HOSTS_SQL's, word for word (a test checks).
FLEET_SNAPSHOT_SQL = statement(
    """
SELECT coalesce((SELECT assignment_paused FROM fleet_control), false) AS paused,
  f.n AS in_flight, f.browser AS browser_in_flight,
  h.name, h.capacity, h.state, a.address, coalesce(a.ssh_port, 22) AS ssh_port,
  coalesce(a.ssh_user, 'scrapefleet') AS ssh_user, a.ssh_key_file,
  a.known_hosts_file, h.probe_failures, h.memory_available_bytes
FROM (SELECT) AS one
LEFT JOIN (
  hosts h LEFT JOIN host_access a ON a.host = h.name
  LEFT JOIN (
    SELECT host, count(*) AS n, count(*) FILTER (WHERE needs_browser) AS browser
    FROM jobs WHERE status IN {in_flight} GROUP BY host
  ) AS f ON f.host = h.name
) ON true
ORDER BY h.name
"""
)
BUSY_LOCK_KEYS_SQL = statement(
    """
SELECT lock_key FROM jobs WHERE lock_key IS NOT NULL AND status IN {in_flight}
"""
)
STATUS_COUNTS_SQL = statement("SELECT * FROM job_status_counts")
# The partial pending index keeps this small.
PENDING_BROWSER_JOBS_SQL = statement(
    """
SELECT count(*) FROM jobs WHERE status = {job.pending} AND needs_browser
"""
)
HOST_LOAD_SQL = statement("SELECT * FROM host_load")
JOB_SQL = statement("SELECT * FROM jobs WHERE id = :id")
JOB_EVENTS_SQL = statement(
    """
SELECT at, from_status, to_status, host, message, error_class
FROM job_events
WHERE job_id = :id
ORDER BY id
"""
)
JOB_STATUSES_SQL = statement("SELECT id, status FROM jobs WHERE id = ANY(:ids)")
# The operator's filter is common.store.operating.job_commands.JOB_FILTER_SQL word for word (a test
# checks): what a retry or cancel would move.
JOBS_MATCHING_BY_STATUS_SQL = statement(
    """
SELECT status, count(*) AS n
FROM jobs
WHERE (CAST(:ids AS bigint[]) IS NULL OR id = ANY(CAST(:ids AS bigint[])))
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:host AS text) IS NULL OR host = :host)
GROUP BY status
"""
)
HOST_EXISTS_SQL = statement("SELECT 1 FROM hosts WHERE name = :name")
# A function (migration 0008): a consumer's own role sees no pending job.
HOST_IS_IDLE_SQL = statement(
    """
SELECT NOT EXISTS (SELECT 1 FROM jobs WHERE host = :host AND status IN {in_flight})
  AND NOT any_pending_job()
"""
)
HAS_UNFINISHED_JOBS_SQL = statement(
    """
SELECT EXISTS (SELECT 1 FROM jobs WHERE status = {job.pending})
  OR EXISTS (SELECT 1 FROM jobs WHERE status IN {in_flight})
"""
)


def fleet_snapshot(conn: Connection) -> FleetSnapshot:
    rows = conn.execute(FLEET_SNAPSHOT_SQL).all()
    paused = bool(rows[0].paused)
    hosts = [HostRow(*r[3:]) for r in rows if r.name is not None]
    in_flight = {r.name: r.in_flight for r in rows if r.in_flight}
    browser = {r.name: r.browser_in_flight for r in rows if r.browser_in_flight}
    return FleetSnapshot(paused, hosts, in_flight, browser)


def busy_lock_keys(conn: Connection) -> set[str]:
    """Lock keys held by a queued or running job anywhere in the fleet."""
    rows = conn.execute(BUSY_LOCK_KEYS_SQL)
    return {r.lock_key for r in rows}


def status_counts(conn: Connection) -> dict[str, int]:
    return {r.status: r.jobs for r in conn.execute(STATUS_COUNTS_SQL)}


def pending_browser_jobs(conn: Connection) -> int:
    """Pending jobs that need a browser (the partial pending index keeps this small)."""
    return int(conn.execute(PENDING_BROWSER_JOBS_SQL).scalar_one())


def host_load(conn: Connection) -> list[dict[str, Any]]:
    """The host_load view: per host state, load, and why its probe fails (migration 0003)."""
    return [dict(r._mapping) for r in conn.execute(HOST_LOAD_SQL)]


def job(conn: Connection, job_id: int) -> dict[str, Any]:
    row = conn.execute(JOB_SQL, {"id": job_id}).first()
    if row is None:
        raise NotFound(f"no job with id {job_id}")
    return dict(row._mapping)


def job_events(conn: Connection, job_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(JOB_EVENTS_SQL, {"id": job_id})
    return [dict(r._mapping) for r in rows]


def job_statuses(conn: Connection, job_ids: Sequence[int]) -> dict[int, str]:
    rows = conn.execute(JOB_STATUSES_SQL, {"ids": list(job_ids)})
    return {r.id: r.status for r in rows}


def jobs_matching_by_status(conn: Connection, which: JobFilter) -> dict[str, int]:
    """How many jobs an operator's filter matches, per status: what a retry or cancel would
    move before it moves it, and why it would move nothing. Same filter as the store's."""
    rows = conn.execute(JOBS_MATCHING_BY_STATUS_SQL, which.params())
    return {r.status: r.n for r in rows}


def host_exists(conn: Connection, name: str) -> bool:
    return conn.execute(HOST_EXISTS_SQL, {"name": name}).first() is not None


def host_is_idle(conn: Connection, host: str) -> bool:
    """Nothing queued or processing on ``host`` and nothing pending anywhere (a pending job may
    yet be assigned here): what a consumer's run-until-idle mode waits for."""
    return bool(conn.execute(HOST_IS_IDLE_SQL, {"host": host}).scalar_one())


def has_unfinished_jobs(conn: Connection) -> bool:
    """True while any job is pending, queued or processing (the daemons' "until idle")."""
    return bool(conn.execute(HAS_UNFINISHED_JOBS_SQL).scalar_one())


# ---------------------------------------------------------------- operator switches and figures


@dataclass(frozen=True)
class FleetControl:
    assignment_paused: bool
    changed_by: str | None = None
    changed_at: Any = None
    reason: str | None = None


FLEET_CONTROL_SQL = statement(
    """
SELECT assignment_paused, changed_by, changed_at, reason FROM fleet_control
"""
)
JOBS_BY_STATUS_AND_KIND_SQL = statement(
    """
SELECT status, kind, count(*) AS n FROM jobs GROUP BY 1, 2
"""
)
# A restart is its own event; a reboot is the host's move into the 'rebooting' state.
HOST_MAINTENANCE_COUNTS_SQL = statement(
    """
SELECT host,
  count(*) FILTER (WHERE event = 'restart') AS restarts,
  count(*) FILTER (WHERE event = 'state' AND to_state = {host.rebooting}) AS reboots
FROM host_events
WHERE event IN ('restart', 'state')
GROUP BY host
"""
)
# The rate_limits view, paused first (by an operator, then by a Retry-After), then the most
# slowed, then the most pending: every key, or (HELD) only the keys held to something. An
# operator's pause is live_controls' (the view's paused_until is the sites' Retry-After).
RATE_KEYS_SQL = statement(
    """
SELECT r.key, r.in_flight, r.started_last_minute, r.pending, r.concurrency_limit,
  r.per_minute_limit, r.factor, r.paused_until, coalesce(c.paused, false) AS operator_paused,
  c.changed_by AS paused_by, c.reason AS pause_reason
FROM rate_limits r
LEFT JOIN live_controls c ON c.scope = 'rate_key' AND c.name = r.key AND c.paused
ORDER BY c.paused IS NULL, r.paused_until IS NULL, r.factor, r.pending DESC, r.key LIMIT :limit
"""
)
RATE_KEYS_HELD_SQL = statement(
    """
SELECT r.key, r.in_flight, r.started_last_minute, r.pending, r.concurrency_limit,
  r.per_minute_limit, r.factor, r.paused_until, coalesce(c.paused, false) AS operator_paused,
  c.changed_by AS paused_by, c.reason AS pause_reason
FROM rate_limits r
LEFT JOIN live_controls c ON c.scope = 'rate_key' AND c.name = r.key AND c.paused
WHERE r.concurrency_limit IS NOT NULL OR r.per_minute_limit IS NOT NULL
  OR r.factor < 1 OR r.paused_until IS NOT NULL OR c.paused
ORDER BY c.paused IS NULL, r.paused_until IS NULL, r.factor, r.pending DESC, r.key LIMIT :limit
"""
)


def fleet_control(conn: Connection) -> FleetControl:
    """The fleet-wide switches; no row (a fresh or truncated table) means nothing is paused."""
    row = conn.execute(FLEET_CONTROL_SQL).first()
    return FleetControl(**row._mapping) if row is not None else FleetControl(False)


def jobs_by_status_and_kind(conn: Connection) -> dict[tuple[str, str], int]:
    """Counts for the metrics gauge. One scan of the hot table, which retention keeps to the
    recent past; the producer runs it every metrics_refresh_s, not every cycle."""
    rows = conn.execute(JOBS_BY_STATUS_AND_KIND_SQL)
    return {(r.status, r.kind): r.n for r in rows}


def host_maintenance_counts(conn: Connection) -> dict[str, tuple[int, int]]:
    """host -> (browser-stack restarts, reboots) as host_events records them: a restart is its
    own event; a reboot is the host's move into the 'rebooting' state."""
    rows = conn.execute(HOST_MAINTENANCE_COUNTS_SQL)
    return {r.host: (r.restarts, r.reboots) for r in rows}


def rate_keys(conn: Connection, *, every_key: bool, limit: int) -> list[dict[str, Any]]:
    """Rows of the rate_limits view, the ones an operator looks at first: paused, then the most
    slowed, then the most pending. Without ``every_key``, only keys held to something: a limit
    (named or the default), a slow-down or a pause; a fleet crawling 100,000 sites would
    otherwise list each of them."""
    statement = RATE_KEYS_SQL if every_key else RATE_KEYS_HELD_SQL
    rows = conn.execute(statement, {"limit": limit})
    return [dict(r._mapping) for r in rows]


# Each schedule for its metrics: the schedules view, how overdue its next slot is, and its last
# run whose every job completed (archived jobs included).
SCHEDULE_FIGURES_SQL = statement(
    """
SELECT s.name, s.paused, s.next_run_at,
  CASE WHEN s.paused THEN 0
       ELSE greatest(extract(epoch FROM now() - s.next_run_at), 0) END AS overdue_s,
  s.last_fired_at, s.last_lag_s,
  (SELECT max(r.fired_at) FROM schedule_runs r JOIN schedule_defs d ON d.id = r.schedule_id
   WHERE d.name = s.name AND cardinality(r.job_ids) > 0
     AND (SELECT count(*) FROM (
            SELECT 1 FROM jobs WHERE id = ANY (r.job_ids) AND status = {job.completed}
            UNION ALL
            SELECT 1 FROM jobs_archive WHERE id = ANY (r.job_ids) AND status = {job.completed}
          ) done) = cardinality(r.job_ids)) AS last_success_at
FROM schedules s
ORDER BY s.name LIMIT :limit
"""
)


def schedule_figures(conn: Connection, limit: int) -> list[dict[str, Any]]:
    return [dict(row) for row in conn.execute(SCHEDULE_FIGURES_SQL, {"limit": limit}).mappings()]


# The host each just-rescued job was taken from: its audit row of the rescue keeps the host
# (jobs_audit writes the old host when the new one is NULL).
RESCUED_FROM_SQL = statement(
    """
SELECT host, count(DISTINCT job_id) AS jobs
FROM job_events
WHERE job_id = ANY(:ids) AND message LIKE 'rescued:%' AND host IS NOT NULL
GROUP BY host
ORDER BY host
"""
)


def rescued_from(conn: Connection, job_ids: Sequence[int]) -> dict[str, int]:
    """Host -> how many of ``job_ids`` were rescued from it (ever: the ids are fresh ones)."""
    rows = conn.execute(RESCUED_FROM_SQL, {"ids": list(job_ids)})
    return {r.host: r.jobs for r in rows}
