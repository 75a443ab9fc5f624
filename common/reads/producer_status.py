"""Is a producer assigning, and since when not? Read from the producers' own rows.

Each producer writes its row in ``producers`` (scrapefleet.common.store.producing.fleet): the leader
at every full cycle, a standby at every try for the lock. A producer that dies writes nothing, so
the readers (``scrapefleet status``, the dashboard, the metrics) judge it by how old its row
is: stale after max(PRODUCER_STALE_INTERVALS x its own interval, PRODUCER_STALE_MIN_S), the
interval as the producer recorded it, not the reader's setting. A fleet where no producer ever
ran counts as down. Ages are measured against the database's clock, the one that stamped the
rows, so a reader on another host with a skewed clock judges the same.

The decisions (``stale_after_s``, ``is_fresh``, ``summarize``) are pure; ``read_producer_status``
is the one read around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.constants import PRODUCER_STALE_INTERVALS, PRODUCER_STALE_MIN_S
from scrapefleet.common.reads import queries
from scrapefleet.common.store.producing.fleet import ProducerRole
from scrapefleet.common.store.sql_text import statement

NO_SECRET = "not sent: no webhook_secret configured"


@dataclass(frozen=True)
class ProducerRow:
    name: str
    host: str
    pid: int
    version: str
    role: str
    interval_s: float
    webhook_secret_set: bool
    started_at: datetime
    last_seen_at: datetime
    last_cycle_at: datetime | None = None
    last_cycle_duration_s: float | None = None


@dataclass(frozen=True)
class StandbyView:
    row: ProducerRow
    up: bool


@dataclass(frozen=True)
class ProducerStatus:
    now: datetime  # the database's clock at the read
    up: bool  # a leader cycled within its staleness bound and has not stopped
    leader: ProducerRow | None  # the producer that cycled last (up or not); None: never any
    down_since: datetime | None = None  # its last cycle, when down; None when up or never seen
    standbys: tuple[StandbyView, ...] = ()
    paused: bool = False
    pause_changed_by: str | None = None
    pause_changed_at: datetime | None = None
    pause_reason: str | None = None
    unsent_webhooks: int = 0  # deliveries waiting (due or later)
    # What the last producer to cycle said, else the last one seen; None: no producer, unknown.
    webhook_secret_set: bool | None = None

    @property
    def webhooks_blocked(self) -> bool:
        """Deliveries are waiting and the producer has no secret to sign them with."""
        return self.unsent_webhooks > 0 and self.webhook_secret_set is False

    def headline(self) -> str:
        """One line: up and who leads, or down and since when."""
        if self.up and self.leader is not None:
            leader = self.leader
            age = _seconds(self.now - leader.last_cycle_at) if leader.last_cycle_at else 0.0
            took = (
                f", took {leader.last_cycle_duration_s * 1000:.0f} ms"
                if leader.last_cycle_duration_s is not None
                else ""
            )
            return (
                f"producer up: leader {leader.name} (pid {leader.pid}, version {leader.version}),"
                f" last cycle {age:.1f} s ago{took}"
            )
        if self.leader is None or self.down_since is None:
            return "producer down: no producer has ever run (nothing is assigned)"
        leader = self.leader
        why = (
            "stopped"
            if leader.role == ProducerRole.STOPPED
            else f"no cycle for {_seconds(self.now - self.down_since):.0f} s"
        )
        return (
            f"producer down since {self.down_since:%Y-%m-%d %H:%M:%S %Z}"
            f" ({why}; last leader {leader.name}): nothing is assigned"
        )

    def lines(self) -> list[str]:
        """The headline, the standbys, the pause and the webhooks, for ``scrapefleet status``."""
        lines = [self.headline()]
        for standby in self.standbys:
            row = standby.row
            state = "up" if standby.up else f"down since {row.last_seen_at:%Y-%m-%d %H:%M:%S %Z}"
            lines.append(f"  standby {row.name} (pid {row.pid}, version {row.version}): {state}")
        if self.paused:
            by = self.pause_changed_by or "?"
            at = (
                f" at {self.pause_changed_at:%Y-%m-%d %H:%M:%S %Z}" if self.pause_changed_at else ""
            )
            why = f": {self.pause_reason}" if self.pause_reason else ""
            lines.append(f"assignment paused by {by}{at}{why}")
        if self.webhooks_blocked:
            lines.append(f"webhooks: {self.unsent_webhooks} deliveries waiting, {NO_SECRET}")
        return lines

    def to_json(self) -> dict[str, Any]:
        leader = self.leader
        return {
            "up": self.up,
            "down_since": self.down_since,
            "leader": _row_json(leader) if leader is not None else None,
            "last_cycle_at": leader.last_cycle_at if leader is not None else None,
            "last_cycle_duration_s": leader.last_cycle_duration_s if leader is not None else None,
            "stale_after_s": stale_after_s(leader.interval_s) if leader is not None else None,
            "paused": self.paused,
            "pause_changed_by": self.pause_changed_by,
            "pause_changed_at": self.pause_changed_at,
            "pause_reason": self.pause_reason,
            "standbys": [{**_row_json(s.row), "up": s.up} for s in self.standbys],
            "webhook_secret_set": self.webhook_secret_set,
        }


def stale_after_s(interval_s: float) -> float:
    """How long a producer with this interval may go without a cycle (or a try) and be up."""
    return max(PRODUCER_STALE_INTERVALS * interval_s, PRODUCER_STALE_MIN_S)


def is_fresh(seen_at: datetime | None, now: datetime, interval_s: float) -> bool:
    """``seen_at`` (a cycle, a try) is recent enough; never seen is not."""
    if seen_at is None:
        return False
    return now - seen_at <= timedelta(seconds=stale_after_s(interval_s))


def summarize(
    rows: Sequence[ProducerRow],
    now: datetime,
    control: queries.FleetControl | None = None,
    unsent_webhooks: int = 0,
) -> ProducerStatus:
    """The fleet's producer status from every producers row, at ``now`` (the database's clock).

    The leader is the row that cycled last: only a lock holder writes a cycle, so that is the
    one assigning, or the last one that did. Up: that cycle is fresh and it has not stopped.
    """
    control = control if control is not None else queries.FleetControl(False)
    cycled = [r for r in rows if r.last_cycle_at is not None]
    leader = max(cycled, key=lambda r: r.last_cycle_at or now) if cycled else None
    up = (
        leader is not None
        and leader.role != ProducerRole.STOPPED
        and is_fresh(leader.last_cycle_at, now, leader.interval_s)
    )
    standbys = tuple(
        StandbyView(r, is_fresh(r.last_seen_at, now, r.interval_s))
        for r in sorted(rows, key=lambda r: r.name)
        if r.role == ProducerRole.STANDBY and r is not leader
    )
    newest = max(rows, key=lambda r: r.last_seen_at) if rows else None
    says = leader or newest
    return ProducerStatus(
        now=now,
        up=up,
        leader=leader,
        down_since=None if up or leader is None else leader.last_cycle_at,
        standbys=standbys,
        paused=control.assignment_paused,
        pause_changed_by=control.changed_by,
        pause_changed_at=control.changed_at,
        pause_reason=control.reason,
        unsent_webhooks=unsent_webhooks,
        webhook_secret_set=says.webhook_secret_set if says is not None else None,
    )


def delivery_state(delivery: dict[str, Any], webhook_secret_set: bool | None) -> str | None:
    """Why a waiting delivery is not being sent, or None when its attempts and next attempt tell
    the truth. A delivery that waits on a producer without a secret would otherwise show
    "attempts 0, next attempt <past>" forever."""
    waiting = delivery.get("delivered_at") is None and delivery.get("gave_up_at") is None
    if waiting and webhook_secret_set is False:
        return NO_SECRET
    return None


# ---------------------------------------------------------------- the read

NOW_SQL = statement("SELECT now()")
_ROWS_SQL = statement(
    """
SELECT name, host, pid, version, role, interval_s, webhook_secret_set, started_at,
  last_seen_at, last_cycle_at, last_cycle_duration_s
FROM producers
"""
)
# Deliveries not delivered nor given up: the due-deliveries partial index holds exactly these.
_UNSENT_WEBHOOKS_SQL = statement(
    """
SELECT count(*) FROM webhook_deliveries WHERE next_attempt_at IS NOT NULL
"""
)
_UNFINISHED_CALLBACKS_SQL = statement(
    """
SELECT count(*) FROM jobs WHERE callback_url IS NOT NULL AND status IN {unfinished}
"""
)


def unsent_webhooks(conn: Connection) -> int:
    return int(conn.execute(_UNSENT_WEBHOOKS_SQL).scalar_one())


def unfinished_callback_jobs(conn: Connection) -> int:
    """Jobs still to finish that will want a webhook: read once, at the producer's start."""
    return int(conn.execute(_UNFINISHED_CALLBACKS_SQL).scalar_one())


def read_producer_status(conn: Connection) -> ProducerStatus:
    now = conn.execute(NOW_SQL).scalar_one()
    rows = [ProducerRow(**r._mapping) for r in conn.execute(_ROWS_SQL)]
    return summarize(rows, now, queries.fleet_control(conn), unsent_webhooks(conn))


def _row_json(row: ProducerRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "host": row.host,
        "pid": row.pid,
        "version": row.version,
        "role": row.role,
        "started_at": row.started_at,
        "last_seen_at": row.last_seen_at,
    }


def _seconds(delta: timedelta) -> float:
    return max(0.0, delta.total_seconds())
