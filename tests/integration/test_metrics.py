"""Prometheus metrics scraped over HTTP from a running producer, checked against the database."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.schema_base import JOB_STATUSES
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import (
    add_hosts,
    producer_settings,
    publish_status,
    submit,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def database_job_counts(engine: Engine) -> dict[tuple[str, str], int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT status, kind, count(*) FROM jobs GROUP BY 1, 2"))
        return {(r[0], r[1]): r[2] for r in rows}


def test_producer_metrics_match_the_database(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    add_hosts(engine, {"h1": 2, "h2": 3})
    publish_status(tmp_path, "h1")
    # h2 publishes nothing: its probes fail.
    submit(engine, [NewJob("noop") for _ in range(7)])
    submit(engine, [NewJob("http_get", {"url": "http://127.0.0.1:9/"}) for _ in range(4)])
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = 8"))
        store.reset_restart_counter(conn, "h1", {"duration_s": 1.0})
        store.reset_restart_counter(conn, "h1", {"duration_s": 1.2})
        store.set_host_state(conn, "h1", "rebooting", "test")
        store.set_host_state(conn, "h1", "active", "test")
    port = free_port()
    settings = producer_settings(
        database_url, tmp_path, metrics_port=port, metrics_refresh_s=0.1, probe_failures_offline=50
    )
    producer = Producer(settings, engine)
    producer.start()
    try:
        # Let it assign (h1 has 2 free slots), then freeze the counts with a pause.
        wait_for(lambda: producer.total_assigned >= 2, 10, "first assignment")
        with engine.begin() as conn:
            store.set_assignment_paused(conn, True, "test", None)
        expected = database_job_counts(engine)

        def jobs_metric_matches() -> bool:
            samples = scrape(port)
            exposed = {
                (dict(labels)["status"], dict(labels)["kind"]): value
                for (name, labels), value in samples.items()
                if name == "scrapefleet_jobs"
            }
            # Every status of a kind is exposed, 0 where the table has none of it.
            nonzero = {key: value for key, value in exposed.items() if value}
            kinds = {kind for _, kind in expected}
            everything = {(status, kind) for status in JOB_STATUSES for kind in kinds}
            return nonzero == expected and set(exposed) == everything

        wait_for(jobs_metric_matches, 10, "scrapefleet_jobs equal to the database's counts")
        assert ("queued", "noop") in expected and ("failed", "http_get") in expected
        wait_for(
            lambda: (
                scrape(port).get(("scrapefleet_probe_failures_total", (("host", "h2"),)), 0) >= 2
            ),
            10,
            "probe failures of h2 counted",
        )
        samples = scrape(port)
    finally:
        producer.stop()

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("scrapefleet_host_restarts_total", host="h1") == 2
    assert value("scrapefleet_host_reboots_total", host="h1") == 1
    assert value("scrapefleet_host_restarts_total", host="h2") == 0
    assert value("scrapefleet_host_state", host="h1", state="active") == 1
    assert value("scrapefleet_host_state", host="h1", state="offline") == 0
    assert value("scrapefleet_host_memory_available_bytes", host="h1") > 0
    assert value("scrapefleet_jobs_assigned_total") >= 2
    assert value("scrapefleet_assignment_cycle_duration_seconds_count", cycle="full") >= 1
    assert value("scrapefleet_assignment_cycle_jobs_count") >= 1
    assert value("scrapefleet_probes_total", host="h1") >= 1
    assert value("scrapefleet_probe_round_duration_seconds_count") >= 1
    # Jobs were pending (paused) since the test began: the oldest has waited that long.
    assert 0 < value("scrapefleet_oldest_pending_age_seconds") < 120
