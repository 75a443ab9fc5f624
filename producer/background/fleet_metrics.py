"""The producer's database-derived metrics: read the fleet's figures, publish a snapshot."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from scrapefleet.common.db.engines import wrapped_errors
from scrapefleet.common.reads import identity_figures, queries
from scrapefleet.common.reads.producer_status import read_producer_status
from scrapefleet.common.reads.progress import oldest_pending_age
from scrapefleet.common.runtime.metrics import (
    FleetSnapshot,
    HostFigures,
    IdentityFigures,
    ProducerFigures,
    RateKeyFigures,
    ScheduleFigures,
    publish_fleet_snapshot,
)

# Series per rate key: the keys held to a limit, slowed or paused, the most pressing first; a
# fleet with a default limit on 100,000 sites would otherwise export 400,000 series.
METRICS_RATE_KEYS = 100
METRICS_SCHEDULES = 500  # series per schedule: more schedules than this are not exported
METRICS_PROFILES = 20  # series per profile: the ones blocked most in the last hour


def read_fleet_snapshot(engine: Engine) -> FleetSnapshot:
    with wrapped_errors(), engine.connect() as conn:
        jobs = queries.jobs_by_status_and_kind(conn)
        hosts = queries.hosts(conn)
        maintenance = queries.host_maintenance_counts(conn)
        producer = read_producer_status(conn)
        oldest = oldest_pending_age(conn)
        rate_keys = queries.rate_keys(conn, every_key=False, limit=METRICS_RATE_KEYS)
        schedules = queries.schedule_figures(conn, METRICS_SCHEDULES)
        pools = identity_figures.pool_figures(conn)
        profiles = identity_figures.profile_figures(conn, METRICS_PROFILES)
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
        rate_keys={
            row["key"]: RateKeyFigures(
                in_flight=row["in_flight"],
                pending=row["pending"],
                factor=row["factor"],
                paused=row["paused_until"] is not None,  # the view shows only a pause to come
            )
            for row in rate_keys
        },
        schedules={row["name"]: _schedule_figures(row) for row in schedules},
        proxy_pools={
            name: IdentityFigures(row["leases"], row["blocks"], row["states"])
            for name, row in pools.items()
        },
        profiles={name: IdentityFigures(*figures) for name, figures in profiles.items()},
    )


def _schedule_figures(row: dict[str, Any]) -> ScheduleFigures:
    def stamp(moment: datetime | None) -> float | None:
        return moment.timestamp() if moment is not None else None

    return ScheduleFigures(
        paused=row["paused"],
        next_run_timestamp_s=row["next_run_at"].timestamp(),
        overdue_s=float(row["overdue_s"]),
        last_run_timestamp_s=stamp(row["last_fired_at"]),
        last_lag_s=float(row["last_lag_s"]) if row["last_lag_s"] is not None else None,
        last_success_timestamp_s=stamp(row["last_success_at"]),
    )


def refresh_fleet_metrics(engine: Engine) -> FleetSnapshot:
    snapshot = read_fleet_snapshot(engine)
    publish_fleet_snapshot(snapshot)
    return snapshot
