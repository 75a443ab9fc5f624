"""Profiles (common.browser.profile_names): the producer binds them as it assigns, a consumer cools
one down after a block, an operator resets, moves and cools them.

A profile's row is made by the first assignment of one of its jobs, bound to that job's host:
its user-data-dir will live there. Cool-downs are times, not timers: a profile is cooling while
``cooldown_until`` is in the future, whatever ``state`` still says (``state`` is for people,
brought back to ``ready`` by the next assignment or a reset).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound, ScrapefleetError
from scrapefleet.common.identities.proxy_pools import block_cooldown_s
from scrapefleet.common.store.operating.hosts import require_host
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "BIND_PROFILES_SQL",
    "COOL_AFTER_BLOCK_SQL",
    "ProfileBusy",
    "ProfileRow",
    "bind_profiles",
    "cool_profile",
    "cool_profile_after_block",
    "list_profiles",
    "move_profile",
    "profile_rows",
    "profile_succeeded",
    "reset_profile",
]


class ProfileBusy(ScrapefleetError):
    """An operator's change that would pull a profile from under a job of it."""


@dataclass(frozen=True)
class ProfileRow:
    """What the planner reads of a profile (no row yet: never assigned, bound to no host)."""

    name: str
    host: str | None
    cooldown_until: datetime | None
    busy_on: str | None  # the host of its queued or running job, if one is


# The chosen profile goes on each job, and each profile's row is made (bound to the job's
# host) or counted; an existing binding is never changed here (the planner keeps to it).
BIND_PROFILES_SQL = statement(
    """
WITH chosen AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:names AS text[]),
    CAST(:hosts AS text[])) AS c(id, name, host)
), marked AS (
  UPDATE jobs SET profile = chosen.name FROM chosen WHERE jobs.id = chosen.id
  RETURNING chosen.name, chosen.host
)
INSERT INTO profiles AS p (name, host, jobs, last_used_at)
SELECT name, min(host), count(*), now() FROM marked GROUP BY name
ON CONFLICT (name) DO UPDATE SET
  host = coalesce(p.host, EXCLUDED.host), jobs = p.jobs + EXCLUDED.jobs,
  last_used_at = now(),
  state = CASE WHEN p.cooldown_until > now() THEN p.state ELSE {profile.ready} END
"""
)
# Counted first; the cool-down, which grows with the blocks in a row, is set by _COOL_FOR_SQL
# in the same transaction (the row stays locked between them). A later cool-down already set
# is kept.
COOL_AFTER_BLOCK_SQL = statement(
    """
UPDATE profiles AS p SET state = {profile.cooling}, blocks = p.blocks + 1,
  consecutive_blocks = p.consecutive_blocks + 1
FROM jobs
WHERE jobs.id = :job_id AND p.name = jobs.profile
RETURNING p.name, p.consecutive_blocks
"""
)
_COOL_FOR_SQL = statement(
    """
UPDATE profiles
SET cooldown_until = greatest(cooldown_until, now() + make_interval(secs => :seconds))
WHERE name = :name
"""
)
# A completed job's profile starts its back-off over.
_SUCCEEDED_SQL = statement(
    """
UPDATE profiles AS p SET consecutive_blocks = 0
FROM jobs
WHERE jobs.id = :job_id AND p.name = jobs.profile AND p.consecutive_blocks > 0
"""
)
# An operator's commands.
_RESET_SQL = statement(
    """
UPDATE profiles SET state = {profile.ready}, cooldown_until = NULL, blocks = 0,
  consecutive_blocks = 0
WHERE name = :name
RETURNING name
"""
)
_COOL_SQL = statement(
    """
UPDATE profiles SET state = {profile.cooling},
  cooldown_until = now() + make_interval(secs => :seconds)
WHERE name = :name
RETURNING cooldown_until
"""
)
_MOVE_SQL = statement("UPDATE profiles SET host = :host WHERE name = :name RETURNING name")

# Reads. The planner's: the rows free now, locked for the assignment (a row another session
# holds is skipped, not waited for), then each name's row, if any, and the host of a queued or
# running job of it.
_LOCK_FREE_SQL = statement(
    """
SELECT name FROM profiles
WHERE name = ANY(CAST(:names AS text[]))
ORDER BY name
FOR NO KEY UPDATE SKIP LOCKED
"""
)
HELD_ELSEWHERE = "(row held by another session)"  # a ProfileRow's busy_on when locked
_ROWS_SQL = statement(
    """
SELECT n.name, p.name IS NOT NULL AS stored, p.host, p.cooldown_until,
  (SELECT j.host FROM jobs j WHERE j.profile = n.name AND j.status IN {in_flight} LIMIT 1)
    AS busy_on
FROM unnest(CAST(:names AS text[])) AS n(name)
LEFT JOIN profiles p ON p.name = n.name
"""
)
_LIST_SQL = statement(
    """
SELECT name, host, state, cooldown_until, last_used_at, jobs, blocks, created_at
FROM profiles
ORDER BY name
"""
)
# A job of the profile queued or running, which a move must wait for.
_HELD_SQL = statement(
    """
SELECT id, host FROM jobs WHERE profile = :name AND status IN {in_flight} LIMIT 1
"""
)


def profile_rows(conn: Connection, names: Iterable[str]) -> dict[str, ProfileRow]:
    """The planner's view of these profiles (a name without a row is unbound and ready). The
    rows are locked for the assignment's transaction, those free now only: a row another
    session holds (its host's consumer may, for as long as it likes) shows as busy, and its
    jobs wait for a later cycle rather than the producer for the row."""
    wanted = sorted(set(names))
    free = set(conn.execute(_LOCK_FREE_SQL, {"names": wanted}).scalars())
    rows = conn.execute(_ROWS_SQL, {"names": wanted})
    return {
        r.name: ProfileRow(
            r.name,
            r.host,
            r.cooldown_until,
            r.busy_on if not r.stored or r.name in free else HELD_ELSEWHERE,
        )
        for r in rows
    }


def bind_profiles(conn: Connection, chosen: Sequence[tuple[int, str, str]]) -> None:
    """(job id, profile, host) of jobs just assigned: the profile goes on the job, its row is
    made (bound to that host) or counted. The unique index on in-flight profiles refuses a
    second job of one profile (the planner never plans one)."""
    if not chosen:
        return
    conn.execute(
        BIND_PROFILES_SQL,
        {
            "ids": [c[0] for c in chosen],
            "names": [c[1] for c in chosen],
            "hosts": [c[2] for c in chosen],
        },
    )


def cool_profile_after_block(
    conn: Connection, job_id: int, cooldown_s: float, max_cooldown_s: float | None = None
) -> str | None:
    """The job's profile was blocked: its blocks count grows, and it cools down for
    ``cooldown_s`` doubled per block in a row before this one, at most ``max_cooldown_s``
    (None: no growth), as a proxy does (proxy_pools.block_cooldown_s); a later cool-down
    already set is kept. Returns its name; None when the job ran under no profile. Runs under
    a consumer's role too: its own host's profiles only."""
    row = conn.execute(COOL_AFTER_BLOCK_SQL, {"job_id": job_id}).first()
    if row is None:
        return None
    longest = cooldown_s if max_cooldown_s is None else max(cooldown_s, max_cooldown_s)
    seconds = block_cooldown_s(cooldown_s, longest, max(1, row.consecutive_blocks))
    conn.execute(_COOL_FOR_SQL, {"name": row.name, "seconds": seconds})
    return str(row.name)


def profile_succeeded(conn: Connection, job_id: int) -> None:
    """The job completed: its profile's back-off starts over (its next block cools it for the
    base time). Nothing when it ran under no profile."""
    conn.execute(_SUCCEEDED_SQL, {"job_id": job_id})


def list_profiles(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(_LIST_SQL)]


def reset_profile(conn: Connection, name: str) -> None:
    """Forget the profile's cool-down and blocks; its host and its data stay."""
    if conn.execute(_RESET_SQL, {"name": name}).first() is None:
        raise _unknown(name)


def cool_profile(conn: Connection, name: str, seconds: float) -> datetime:
    """No job for the profile for ``seconds`` from now; returns when it ends."""
    row = conn.execute(_COOL_SQL, {"name": name, "seconds": seconds}).first()
    if row is None:
        raise _unknown(name)
    until: datetime = row.cooldown_until
    return until


def move_profile(conn: Connection, name: str, host: str) -> None:
    """Bind the profile to ``host`` (its directory must be copied there by the operator).
    Refused while one of its jobs is queued or running: it runs on the old host's copy."""
    require_host(conn, host)
    held = conn.execute(_HELD_SQL, {"name": name}).first()
    if held is not None:
        raise ProfileBusy(
            f"profile {name!r}: job {held.id} of it is queued or running on {held.host};"
            " move it once that job has finished"
        )
    if conn.execute(_MOVE_SQL, {"name": name, "host": host}).first() is None:
        raise _unknown(name)


def _unknown(name: str) -> NotFound:
    return NotFound(f"no profile named {name!r} (a profile is listed once a job has used it)")
