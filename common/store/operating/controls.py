"""An operator's live controls: pause or resume one rate key, kind or crawl, and set or clear a
key's or kind's limits, without restarting the producer (migration 0023).

Each change is one transaction: the control's row is locked, the change is written only if it
changes something (pausing a paused key is "already paused": False, nothing written), and a
row of ``control_changes`` records who, what, the row before and after, and why. A row that
neither pauses nor limits any more is deleted, so ``live_controls`` lists exactly what an
operator holds. The producer reads the table each cycle (``live_controls``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.errors import NotFound
from scrapefleet.common.store.sql_text import statement

__all__ = [
    "NO_HOLDS",
    "ControlChange",
    "Holds",
    "LiveControl",
    "LiveControls",
    "Scope",
    "change_control",
    "live_controls",
    "scope_words",
    "unchanged_words",
]

NAME_MAX_CHARS = 200  # the table's check


class Scope(StrEnum):
    RATE_KEY = "rate_key"
    KIND = "kind"
    CRAWL = "crawl"


class ControlChange(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    LIMIT = "limit"
    UNLIMIT = "unlimit"


@dataclass(frozen=True)
class LiveControl:
    """One key's, kind's or crawl's live state; the default (nothing held) is all empty."""

    paused: bool = False
    concurrency: int | None = None
    per_minute: int | None = None

    @property
    def holds_anything(self) -> bool:
        return self.paused or self.concurrency is not None or self.per_minute is not None

    def as_json(self) -> dict[str, Any] | None:
        if not self.holds_anything:
            return None
        return {
            "paused": self.paused,
            "concurrency": self.concurrency,
            "per_minute": self.per_minute,
        }


@dataclass(frozen=True)
class Holds:
    """What an operator paused, and the kinds no host with a free slot runs: left out of every
    pending read (common.store.producing.assignment)."""

    keys: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    crawls: tuple[int, ...] = ()
    only_kinds: tuple[str, ...] | None = None  # None: any kind may be read

    def params(self) -> dict[str, list[str] | list[int] | None]:
        return {
            "held_keys": list(self.keys),
            "held_kinds": list(self.kinds),
            "held_crawls": list(self.crawls),
            "only_kinds": None if self.only_kinds is None else list(self.only_kinds),
        }


NO_HOLDS = Holds()


@dataclass(frozen=True)
class LiveControls:
    """What the producer applies this cycle: (scope, name) -> its control."""

    rows: dict[tuple[Scope, str], LiveControl] = field(default_factory=dict)

    def paused(self, scope: Scope) -> tuple[str, ...]:
        return tuple(sorted(n for (s, n), c in self.rows.items() if s == scope and c.paused))

    def holds(self) -> Holds:
        crawls = tuple(int(n) for n in self.paused(Scope.CRAWL) if n.isdigit())
        return Holds(self.paused(Scope.RATE_KEY), self.paused(Scope.KIND), crawls)

    def limits(self, scope: Scope) -> dict[str, LiveControl]:
        return {
            n: c
            for (s, n), c in self.rows.items()
            if s == scope and (c.concurrency is not None or c.per_minute is not None)
        }


UPSERT_CONTROL_SQL = statement(
    """
INSERT INTO live_controls
  (scope, name, paused, concurrency, per_minute, changed_by, changed_at, reason)
VALUES (:scope, :name, :paused, :concurrency, :per_minute, :who, now(), :reason)
ON CONFLICT (scope, name) DO UPDATE SET
  paused = EXCLUDED.paused, concurrency = EXCLUDED.concurrency,
  per_minute = EXCLUDED.per_minute, changed_by = EXCLUDED.changed_by, changed_at = now(),
  reason = EXCLUDED.reason
"""
)
DELETE_CONTROL_SQL = statement("DELETE FROM live_controls WHERE scope = :scope AND name = :name")
RECORD_CHANGE_SQL = statement(
    """
INSERT INTO control_changes (changed_by, scope, name, change, before, after, reason)
VALUES (:who, :scope, :name, :change, CAST(:before AS jsonb), CAST(:after AS jsonb), :reason)
"""
)
LOCK_CONTROL_SQL = statement(
    """
SELECT paused, concurrency, per_minute FROM live_controls
WHERE scope = :scope AND name = :name
FOR UPDATE
"""
)
# The advisory lock key space of a first change (no row to lock yet): two operators pausing the
# same new key at once write one row and one change, not two.
_NEW_ROW_LOCK_SQL = statement(
    """
SELECT pg_advisory_xact_lock(hashtext('live_controls'), hashtext(:key))
"""
)

# Reads.
# Whether a key, kind or crawl is known at all: a job has it (or a host runs the kind, or the
# producer has limits for the key), or the crawl has its row. Asked only when resuming or
# unlimiting something no control holds, to tell a typo from "not paused".
EXISTS_SQL = statement(
    """
SELECT CASE CAST(:scope AS text)
  WHEN 'rate_key' THEN EXISTS (SELECT 1 FROM jobs WHERE rate_key = :name)
    OR EXISTS (SELECT 1 FROM rate_keys WHERE key = :name)
    OR EXISTS (SELECT 1 FROM jobs_archive WHERE rate_key = :name)
  WHEN 'kind' THEN EXISTS (SELECT 1 FROM jobs WHERE kind = :name)
    OR EXISTS (SELECT 1 FROM hosts WHERE jsonb_exists(kinds, :name))
    OR EXISTS (SELECT 1 FROM jobs_archive WHERE kind = :name)
  ELSE EXISTS (SELECT 1 FROM crawl_runs WHERE CAST(id AS text) = :name)
END
"""
)
READ_CONTROLS_SQL = statement(
    """
SELECT scope, name, paused, concurrency, per_minute FROM live_controls
"""
)


def live_controls(conn: Connection) -> LiveControls:
    """Every live control (a handful of rows: read every producer cycle)."""
    return LiveControls(
        {
            (Scope(r.scope), r.name): LiveControl(r.paused, r.concurrency, r.per_minute)
            for r in conn.execute(READ_CONTROLS_SQL)
        }
    )


def _next(before: LiveControl, change: ControlChange, limits: LiveControl | None) -> LiveControl:
    """The control after ``change`` (pure)."""
    if change is ControlChange.PAUSE:
        return replace(before, paused=True)
    if change is ControlChange.RESUME:
        return replace(before, paused=False)
    if change is ControlChange.LIMIT:
        assert limits is not None
        return replace(before, concurrency=limits.concurrency, per_minute=limits.per_minute)
    return replace(before, concurrency=None, per_minute=None)


def change_control(
    conn: Connection,
    scope: Scope,
    name: str,
    change: ControlChange,
    who: str,
    reason: str | None,
    limits: LiveControl | None = None,
) -> bool:
    """Apply one change; False (nothing written) when it changes nothing. ``limits`` carries
    the concurrency and per-minute values of a LIMIT change (the caller validated them).
    NotFound when resuming or unlimiting a key, kind or crawl that does not exist at all (a
    pause may come before the jobs it is meant for)."""
    params = {"scope": str(scope), "name": name}
    conn.execute(_NEW_ROW_LOCK_SQL, {"key": f"{scope}:{name}"})
    row = conn.execute(LOCK_CONTROL_SQL, params).first()
    undoing = change in (ControlChange.RESUME, ControlChange.UNLIMIT)
    if row is None and undoing and not conn.execute(EXISTS_SQL, params).scalar_one():
        raise NotFound(f"{scope_words(scope)} {name} does not exist: nothing changed")
    before = LiveControl(row.paused, row.concurrency, row.per_minute) if row else LiveControl()
    after = _next(before, change, limits)
    if after == before:
        return False
    if after.holds_anything:
        conn.execute(
            UPSERT_CONTROL_SQL,
            {
                **params,
                "paused": after.paused,
                "concurrency": after.concurrency,
                "per_minute": after.per_minute,
                "who": who,
                "reason": reason,
            },
        )
    else:
        conn.execute(DELETE_CONTROL_SQL, params)
    conn.execute(
        RECORD_CHANGE_SQL,
        {
            **params,
            "change": str(change),
            "who": who,
            "reason": reason,
            "before": _json(before.as_json()),
            "after": _json(after.as_json()),
        },
    )
    return True


def scope_words(scope: Scope) -> str:
    """How a scope reads in a sentence: rate key, kind, crawl."""
    return str(scope).replace("_", " ")


def unchanged_words(change: ControlChange) -> str:
    """Why a change changed nothing, after the thing's name."""
    return {
        ControlChange.PAUSE: "is paused already",
        ControlChange.RESUME: "is not paused",
        ControlChange.LIMIT: "has these limits already",
        ControlChange.UNLIMIT: "has no live limit",
    }[change]


def _json(document: dict[str, Any] | None) -> str | None:
    return None if document is None else json.dumps(document)
