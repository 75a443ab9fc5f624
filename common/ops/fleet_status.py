"""The fleet's status as one read: what `scrapefleet status` prints and the dashboard's
`/api/status` serves, so the two never disagree.

One snapshot: every part is read in one REPEATABLE READ transaction, so the totals of the
progress line and of the per-status line agree even while jobs move. The verdict
(``FleetStatus.exit_code``) lets a monitor or a script act on `status` without parsing it:

    0  the producer is up, and a host is active wherever work is pending
    3  the producer is down (nothing is assigned)
    4  work is pending and no host is active to take it, or no active host runs its kind
    5  work is held: pending jobs of a key, kind or crawl an operator paused, or assignment
       paused (the progress line's "no ETA" says which)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common.ops.render import render_status
from scrapefleet.common.reads import queries
from scrapefleet.common.reads.kind_waits import waiting_kinds
from scrapefleet.common.reads.pool_waits import pools_in_trouble, waiting_pools
from scrapefleet.common.reads.producer_status import NO_SECRET, ProducerStatus, read_producer_status
from scrapefleet.common.reads.progress import progress_json, read_progress, render_progress


class StatusVerdict(IntEnum):
    """`scrapefleet status`'s exit code."""

    HEALTHY = 0
    PRODUCER_DOWN = 3
    NO_ACTIVE_HOST = 4
    WORK_HELD = 5


def status_verdict(
    producer_up: bool,
    remaining: int,
    hosts: list[dict[str, Any]],
    *,
    kinds_waiting: bool = False,
    held: int = 0,
    assignment_paused: bool = False,
) -> StatusVerdict:
    """Whether the fleet can finish its work: a producer assigning, a host to take each job's
    kind, nothing an operator holds."""
    if not producer_up:
        return StatusVerdict.PRODUCER_DOWN
    if remaining > 0 and not any(host.get("state") == "active" for host in hosts):
        return StatusVerdict.NO_ACTIVE_HOST
    if kinds_waiting:
        return StatusVerdict.NO_ACTIVE_HOST
    if remaining > 0 and (held > 0 or assignment_paused):
        return StatusVerdict.WORK_HELD
    return StatusVerdict.HEALTHY


@dataclass(frozen=True)
class FleetStatus:
    producer: ProducerStatus
    counts: dict[str, int]
    hosts: list[dict[str, Any]]
    pending_browser: int
    progress: dict[str, Any]
    # Pending kinds no active host runs: kind, jobs, reason (common.reads.kind_waits).
    waiting_kinds: tuple[dict[str, Any], ...] = ()
    # Pools whose pending jobs wait for a proxy, and pools blocked often in the last hour
    # (common.reads.pool_waits).
    waiting_pools: tuple[dict[str, Any], ...] = ()
    pools_in_trouble: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        return {
            "producer": self.producer.to_json(),
            "jobs": self.counts,
            "verdict": {"exit_code": int(self.verdict), "name": self.verdict.name.lower()},
            "progress": progress_json(self.progress, self.producer.up),
            "hosts": self.hosts,
            "pending_browser_jobs": self.pending_browser,
            "waiting_kinds": list(self.waiting_kinds),
            "waiting_pools": list(self.waiting_pools),
            "pools_in_trouble": list(self.pools_in_trouble),
            "webhooks": {
                "unsent": self.producer.unsent_webhooks,
                "not_sent_reason": NO_SECRET if self.producer.webhooks_blocked else None,
            },
        }

    @property
    def verdict(self) -> StatusVerdict:
        return status_verdict(
            self.producer.up,
            int(self.progress["remaining"]),
            self.hosts,
            kinds_waiting=bool(self.waiting_kinds),
            held=int(self.progress.get("held") or 0),
            assignment_paused=self.producer.paused,
        )

    def json(self) -> str:
        return json.dumps(self.document(), default=str, indent=2)

    def text(self) -> str:
        return "\n".join(
            [
                *self.producer.lines(),
                render_progress(self.progress, self.producer.up),
                render_status(self.counts, self.hosts, self.pending_browser),
                *(f"{w['jobs']} job(s) {w['reason']}" for w in self.waiting_kinds),
                *(f"{w['jobs']} job(s) {w['reason']}" for w in self.waiting_pools),
                *self.pools_in_trouble,
            ]
        )


def read_fleet_status(conn: Connection) -> FleetStatus:
    """Every part from one snapshot (``conn`` must not be in a transaction yet)."""
    snapshot = conn.execution_options(isolation_level="REPEATABLE READ")
    with snapshot.begin():
        return _read(snapshot)


def _read(conn: Connection) -> FleetStatus:
    return FleetStatus(
        producer=read_producer_status(conn),
        counts=queries.status_counts(conn),
        hosts=queries.host_load(conn),
        pending_browser=queries.pending_browser_jobs(conn),
        progress=read_progress(conn),
        waiting_kinds=tuple(waiting_kinds(conn)),
        waiting_pools=tuple(waiting_pools(conn)),
        pools_in_trouble=tuple(pools_in_trouble(conn)),
    )
