"""The producers' own rows: each producer process says who it is, what it does, and when.

One row per process (``producers``, migration 0007), written only by that process, so a deposed
leader and its successor never write the same row: the leader at each full cycle, inside the
cycle's assignment transaction (one upsert per interval, never per wake-up); a standby at each
try for the lock; every producer when it starts and when it stops cleanly. A producer that dies
writes nothing: readers (common.reads.producer_status) tell it from its row going stale.

Upserts rather than UPDATEs: a producer driven by run_cycle alone never registered, and a row
deleted by hand comes back at the next cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

__all__ = [
    "LEADER_CYCLE_SQL",
    "PRUNE_PRODUCERS_SQL",
    "REGISTER_PRODUCER_SQL",
    "SAVE_FLEET_LIMITS_SQL",
    "STANDBY_TRY_SQL",
    "STOPPED_SQL",
    "ProducerIdentity",
    "ProducerRole",
    "prune_producers",
    "record_leader_cycle",
    "record_producer_stopped",
    "record_standby_try",
    "register_producer",
    "save_fleet_limits",
]


class ProducerRole(StrEnum):
    LEADER = "leader"  # holds the lock and assigns
    STANDBY = "standby"  # tries the lock every interval
    STOPPED = "stopped"  # stopped cleanly (a killed producer keeps its last role, gone stale)


@dataclass(frozen=True)
class ProducerIdentity:
    name: str  # unique per process: host:pid by default
    host: str
    pid: int
    version: str
    interval_s: float  # its producer_interval_s, by which readers judge its staleness
    webhook_secret_set: bool


# A new process (or a name reused after a reboot) starts afresh: no cycle of its own yet.
REGISTER_PRODUCER_SQL = statement(
    """
INSERT INTO producers (name, host, pid, version, role, interval_s, webhook_secret_set)
VALUES (:name, :host, :pid, :version, :role, :interval_s, :webhook_secret_set)
ON CONFLICT (name) DO UPDATE SET
  host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
  role = EXCLUDED.role, interval_s = EXCLUDED.interval_s,
  webhook_secret_set = EXCLUDED.webhook_secret_set, last_seen_at = now(),
  started_at = now(), last_cycle_at = NULL, last_cycle_duration_s = NULL
"""
)
# The leader's cycle: its identity as REGISTER_PRODUCER_SQL writes it, and the cycle's times.
LEADER_CYCLE_SQL = statement(
    """
INSERT INTO producers (name, host, pid, version, role, interval_s, webhook_secret_set,
  last_cycle_at, last_cycle_duration_s)
VALUES (:name, :host, :pid, :version, :role, :interval_s, :webhook_secret_set,
  now(), :duration)
ON CONFLICT (name) DO UPDATE SET
  host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
  role = EXCLUDED.role, interval_s = EXCLUDED.interval_s,
  webhook_secret_set = EXCLUDED.webhook_secret_set, last_seen_at = now(),
  last_cycle_at = now(), last_cycle_duration_s = EXCLUDED.last_cycle_duration_s
"""
)
# A standby's try: its identity only.
STANDBY_TRY_SQL = statement(
    """
INSERT INTO producers (name, host, pid, version, role, interval_s, webhook_secret_set)
VALUES (:name, :host, :pid, :version, :role, :interval_s, :webhook_secret_set)
ON CONFLICT (name) DO UPDATE SET
  host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
  role = EXCLUDED.role, interval_s = EXCLUDED.interval_s,
  webhook_secret_set = EXCLUDED.webhook_secret_set, last_seen_at = now()
"""
)
# ``:role``: ProducerRole.STOPPED.
STOPPED_SQL = statement(
    "UPDATE producers SET role = :role, last_seen_at = now() WHERE name = :name"
)
PRUNE_PRODUCERS_SQL = statement(
    """
DELETE FROM producers WHERE last_seen_at < now() - make_interval(secs => :keep)
"""
)


def _params(me: ProducerIdentity, role: ProducerRole) -> dict[str, object]:
    return {
        "name": me.name,
        "host": me.host,
        "pid": me.pid,
        "version": me.version,
        "role": role.value,
        "interval_s": me.interval_s,
        "webhook_secret_set": me.webhook_secret_set,
    }


# What consumers' roles may do, as this producer's settings say (migration 0031's
# fleet_limits, read by spawn_children): the last producer started sets it.
SAVE_FLEET_LIMITS_SQL = statement(
    """
INSERT INTO fleet_limits (one, spawn_per_host_per_minute) VALUES (true, :spawn_per_minute)
ON CONFLICT (one) DO UPDATE SET spawn_per_host_per_minute = excluded.spawn_per_host_per_minute
"""
)


def save_fleet_limits(conn: Connection, *, spawn_per_host_per_minute: int) -> None:
    conn.execute(SAVE_FLEET_LIMITS_SQL, {"spawn_per_minute": spawn_per_host_per_minute})


def register_producer(conn: Connection, me: ProducerIdentity) -> None:
    """At start: a standby until it takes the lock."""
    conn.execute(REGISTER_PRODUCER_SQL, _params(me, ProducerRole.STANDBY))


def record_leader_cycle(
    conn: Connection, me: ProducerIdentity, last_cycle_duration_s: float | None
) -> None:
    """The leader's full cycle, at the transaction's start time; ``last_cycle_duration_s`` is
    the last full cycle that finished (this one is still running)."""
    conn.execute(
        LEADER_CYCLE_SQL, {**_params(me, ProducerRole.LEADER), "duration": last_cycle_duration_s}
    )


def record_standby_try(conn: Connection, me: ProducerIdentity) -> None:
    """A standby that tried the lock and did not get it."""
    conn.execute(STANDBY_TRY_SQL, _params(me, ProducerRole.STANDBY))


def record_producer_stopped(conn: Connection, name: str) -> None:
    conn.execute(STOPPED_SQL, {"name": name, "role": ProducerRole.STOPPED.value})


def prune_producers(conn: Connection, keep_s: float) -> int:
    """Forget producers unseen for ``keep_s`` (each restart adds a row: a new pid)."""
    return conn.execute(PRUNE_PRODUCERS_SQL, {"keep": keep_s}).rowcount
