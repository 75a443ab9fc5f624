"""The producer's database-derived metrics: read the fleet's figures, publish a snapshot."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from scrapefleet.common import queries
from scrapefleet.common.db import wrapped_errors
from scrapefleet.common.metrics import (
    FleetSnapshot,
    HostFigures,
    ProducerFigures,
    publish_fleet_snapshot,
)
from scrapefleet.common.producer_status import read_producer_status
from scrapefleet.common.progress import read_progress


def read_fleet_snapshot(engine: Engine) -> FleetSnapshot:
    with wrapped_errors(), engine.connect() as conn:
        jobs = queries.jobs_by_status_and_kind(conn)
        hosts = queries.hosts(conn)
        maintenance = queries.host_maintenance_counts(conn)
        producer = read_producer_status(conn)
        oldest = read_progress(conn)["oldest_pending_age"]
    return FleetSnapshot(
        jobs=jobs,
        hosts={
            h.name: HostFigures(h.state, h.memory_available_bytes, *maintenance.get(h.name, (0, 0)))
            for h in hosts
        },
        producer=ProducerFigures(
            up=producer.up,
            last_cycle_timestamp_s=(
                producer.leader.last_cycle_at.timestamp()
                if producer.leader is not None and producer.leader.last_cycle_at is not None
                else None
            ),
        ),
        oldest_pending_age_s=oldest.total_seconds() if oldest is not None else 0.0,
    )


def refresh_fleet_metrics(engine: Engine) -> FleetSnapshot:
    snapshot = read_fleet_snapshot(engine)
    publish_fleet_snapshot(snapshot)
    return snapshot
