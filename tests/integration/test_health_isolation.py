"""One host's status that the database refuses costs that host alone: the producer writes each
host's health in a savepoint of its own, and the refused one becomes a failed probe."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store import NewJob
from scrapefleet.producer.probes.local_probe import HostTarget
from scrapefleet.producer.producer_daemon import Producer
from tests.host_status_factory import status_for
from tests.integration.producer_helpers import add_hosts, producer_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

# Values parse_status would refuse, forced past it: what a bug in a bound would let through.
POISONED = {
    "h1": status_for("h1", memory_available_bytes=2**63),  # bigint out of range
    "h3": status_for("h3", browser="failing", browser_retry_at=1e300),  # timestamp out of range
}


class FixedProbe:
    def __init__(self, results: dict[str, HostStatus | ProbeError]) -> None:
        self.results = results

    def probe_all(self, targets: Sequence[HostTarget]) -> dict[str, HostStatus | ProbeError]:
        return {t.name: self.results[t.name] for t in targets}

    def close(self) -> None:
        pass


def test_a_refused_status_leaves_the_other_hosts_healthy_and_assigned(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    add_hosts(engine, {"h1": 2, "h2": 2, "h3": 2})
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop", {})] * 2, default_max_attempts=1)
    probe = FixedProbe({**POISONED, "h2": status_for("h2", memory_available_bytes=5 << 30)})
    producer = Producer(
        producer_settings(database_url, tmp_path, probe_failures_offline=1), engine, probe
    )
    try:
        report = producer.run_cycle()
    finally:
        producer.stop()  # its leader lock must not outlive the test
    with engine.connect() as conn:
        hosts = {
            r.name: r
            for r in conn.execute(
                sa.text(
                    "SELECT name, state, probe_failures, last_probe_error, last_seen_at,"
                    " memory_available_bytes FROM hosts"
                )
            )
        }
        assigned: dict[str, int] = dict(
            conn.execute(sa.text("SELECT host, count(*) FROM jobs GROUP BY host")).all()
        )
    assert hosts["h2"].last_seen_at is not None and hosts["h2"].probe_failures == 0
    assert hosts["h2"].memory_available_bytes == 5 << 30
    for name in POISONED:
        assert hosts[name].probe_failures == 1, name
        assert hosts[name].last_probe_error.startswith("status refused by the database"), name
        assert hosts[name].state == "offline" and hosts[name].last_seen_at is None, name
    assert assigned == {"h2": 2}
    assert {(t[0], t[2]) for t in report.transitions} == {("h1", "offline"), ("h3", "offline")}
