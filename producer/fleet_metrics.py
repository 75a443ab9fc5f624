"""The producer's database-derived metrics: read the fleet's figures, publish a snapshot."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from scrapefleet.common import queries
from scrapefleet.common.db import wrapped_errors
from scrapefleet.common.metrics import FleetSnapshot, HostFigures, publish_fleet_snapshot


def read_fleet_snapshot(engine: Engine) -> FleetSnapshot:
    with wrapped_errors(), engine.connect() as conn:
        jobs = queries.jobs_by_status_and_kind(conn)
        hosts = queries.hosts(conn)
        maintenance = queries.host_maintenance_counts(conn)
    return FleetSnapshot(
        jobs=jobs,
        hosts={
            h.name: HostFigures(h.state, h.memory_available_bytes, *maintenance.get(h.name, (0, 0)))
            for h in hosts
        },
    )


def refresh_fleet_metrics(engine: Engine) -> FleetSnapshot:
    snapshot = read_fleet_snapshot(engine)
    publish_fleet_snapshot(snapshot)
    return snapshot
