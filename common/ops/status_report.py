"""The fleet's status as one read: what `scrapefleet status` prints and the dashboard's
`/api/status` serves, so the two never disagree."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from scrapefleet.common import queries
from scrapefleet.common.ops.render import render_status
from scrapefleet.common.producer_status import NO_SECRET, ProducerStatus, read_producer_status
from scrapefleet.common.progress import progress_json, read_progress, render_progress


@dataclass(frozen=True)
class FleetStatus:
    producer: ProducerStatus
    counts: dict[str, int]
    hosts: list[dict[str, Any]]
    pending_browser: int
    progress: dict[str, Any]

    def document(self) -> dict[str, Any]:
        return {
            "producer": self.producer.to_json(),
            "jobs": self.counts,
            "progress": progress_json(self.progress),
            "hosts": self.hosts,
            "pending_browser_jobs": self.pending_browser,
            "webhooks": {
                "unsent": self.producer.unsent_webhooks,
                "not_sent_reason": NO_SECRET if self.producer.webhooks_blocked else None,
            },
        }

    def json(self) -> str:
        return json.dumps(self.document(), default=str, indent=2)

    def text(self) -> str:
        return "\n".join(
            [
                *self.producer.lines(),
                render_progress(self.progress),
                render_status(self.counts, self.hosts, self.pending_browser),
            ]
        )


def read_fleet_status(conn: Connection) -> FleetStatus:
    return FleetStatus(
        producer=read_producer_status(conn),
        counts=queries.status_counts(conn),
        hosts=queries.host_load(conn),
        pending_browser=queries.pending_browser_jobs(conn),
        progress=read_progress(conn),
    )
