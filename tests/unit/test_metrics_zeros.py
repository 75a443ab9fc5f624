"""scrapefleet_jobs reads 0 for a status with no jobs, rather than vanishing."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scrapefleet.common.db.schema_base import JOB_STATUSES
from scrapefleet.common.runtime.metrics import (
    CONSUMER_REGISTRY,
    PRODUCER_REGISTRY,
    FleetSnapshot,
    _FleetCollector,
    job_counts_with_zeros,
)

pytestmark = pytest.mark.timeout(30)


def _jobs_samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.labels["status"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "scrapefleet_jobs"
        for s in family.samples
    }


def test_every_status_of_every_kind_with_zeros() -> None:
    filled = job_counts_with_zeros({("completed", "noop"): 4}, kinds=["http_get"])
    assert filled[("completed", "noop")] == 4
    assert filled[("pending", "noop")] == 0 and filled[("pending", "http_get")] == 0
    assert set(filled) == {(s, k) for s in JOB_STATUSES for k in ("noop", "http_get")}


def test_a_queue_that_empties_reads_zero_at_the_next_scrape() -> None:
    collector = _FleetCollector()  # the producer's, on a registry of its own
    registry = CollectorRegistry()
    registry.register(collector)
    collector.publish(FleetSnapshot(jobs={("pending", "noop"): 3, ("completed", "noop"): 1}))
    assert _jobs_samples(registry)[("pending", "noop")] == 3
    collector.publish(FleetSnapshot(jobs={("completed", "noop"): 4}))
    samples = _jobs_samples(registry)
    assert samples[("pending", "noop")] == 0 and samples[("failed", "noop")] == 0
    # A kind seen once keeps its series after its last job is archived: all of them at 0.
    collector.publish(FleetSnapshot(jobs={}))
    assert _jobs_samples(registry)[("completed", "noop")] == 0


def _names(registry: CollectorRegistry) -> set[str]:
    return {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_each_daemon_exports_only_its_own_series() -> None:
    producer, consumer = _names(PRODUCER_REGISTRY), _names(CONSUMER_REGISTRY)
    assert "scrapefleet_jobs_assigned" in producer
    assert "scrapefleet_job_duration_seconds" in consumer
    assert not {n for n in consumer if "assign" in n or "probe" in n or "webhook" in n}
    assert "scrapefleet_job_duration_seconds" not in producer
    assert "process_cpu_seconds" in producer and "process_cpu_seconds" in consumer
