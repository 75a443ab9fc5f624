"""Between probes the producer counts a host's jobs in the database and adds only what the
database cannot know: threads still busy with jobs no longer the host's (``stuck``)."""

from __future__ import annotations

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probes.recent_probes import Probed, current_probes
from tests.host_status_factory import status_for

pytestmark = pytest.mark.timeout(10)


def _running(probes: dict[str, HostStatus | ProbeError], host: str) -> int:
    result = probes[host]
    assert isinstance(result, HostStatus)
    return result.running


def test_the_database_count_plus_the_stuck_threads() -> None:
    # The document is from the last heartbeat (running 6), the database says 2 in flight now:
    # the slots freed since are free, the stuck thread still takes one.
    last = {"h1": Probed(status_for("h1", running=6, stuck=1), in_flight_at_probe=3)}
    assert _running(current_probes(last, {"h1": 2}), "h1") == 3
    assert _running(current_probes(last, {}), "h1") == 1


def test_a_stale_document_adds_nothing_when_nothing_is_stuck() -> None:
    # Written before four claims were committed: its running count is below the database's.
    last = {"h1": Probed(status_for("h1", running=6, stuck=0), in_flight_at_probe=2)}
    assert _running(current_probes(last, {"h1": 5}), "h1") == 5


def test_an_older_consumer_without_stuck_keeps_the_excess_at_the_probe() -> None:
    last = {"h1": Probed(status_for("h1", running=4), in_flight_at_probe=3)}
    assert _running(current_probes(last, {"h1": 1}), "h1") == 2


def test_a_failed_probe_stays_failed() -> None:
    failure = ProbeError("no status file")
    assert current_probes({"h1": Probed(failure, 0)}, {"h1": 3})["h1"] is failure
