"""A dead producer is visible: a real producer process is seen up, is killed with SIGKILL, and
``scrapefleet status --json``, the dashboard and a standby's /metrics say "producer down" within
two intervals of its staleness bound."""

from __future__ import annotations

import json
import signal
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from scrapefleet.common.constants import PRODUCER_ADVISORY_LOCK_KEY
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.reads.producer_status import stale_after_s
from scrapefleet.common.settings import load_settings
from tests.cli_helpers import run_cli
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

T = TypeVar("T")

INTERVAL_S = 0.3
FAST = {
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": str(INTERVAL_S),
    "SCRAPEFLEET_METRICS_REFRESH_S": "0.2",
}
# Down is due at the staleness bound after the last cycle; two intervals more of slack (plus
# the CLI's own start-up, a second or so) is what the readers are allowed.
DOWN_WITHIN_S = stale_after_s(INTERVAL_S) + 2 * INTERVAL_S + 2.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status_json(database_url: str) -> dict[str, Any]:
    done = run_cli(["status", "--json"], database_url)
    document = json.loads(done.stdout)
    # The exit code is the verdict the document carries: 3 while the producer is down.
    assert done.returncode == document["verdict"]["exit_code"], done.stderr
    assert (done.returncode == 3) == (not document["producer"]["up"])
    return document["producer"]


def producer_metrics(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}  # not listening yet
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("scrapefleet_producer_")
    }


def _when(value: T, condition: Callable[[T], bool]) -> T | None:
    return value if condition(value) else None


class LockWaiter:
    """Waits for the leader lock on its own session and keeps it: a leader whose lock outlives
    it (its host vanished; the server has not noticed yet), so the standby cannot take over and
    its metrics must say that nothing assigns."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.backend_pid: int | None = None
        self.holding = threading.Event()
        self._conn = engine.connect()
        self.backend_pid = self._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        self._conn.commit()
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            self._conn.execute(
                sa.text("SELECT pg_advisory_lock(:key)"), {"key": PRODUCER_ADVISORY_LOCK_KEY}
            )
            self.holding.set()
        except sa.exc.DBAPIError:
            pass  # cancelled at the end of a test that failed before the kill

    def close(self) -> None:
        if not self.holding.is_set():
            with self._engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_cancel_backend(:p)"), {"p": self.backend_pid})
        self._thread.join(10)
        self._conn.invalidate()  # ends the session, and the lock with it
        self._conn.close()


@pytest.fixture
def fleets(database_url: str, tmp_path: Path) -> Iterator[list[LocalFleet]]:
    made: list[LocalFleet] = []
    yield made
    for fleet in made:
        fleet.stop()


def test_a_killed_producer_reads_as_down_everywhere(
    engine: Engine, database_url: str, tmp_path: Path, fleets: list[LocalFleet]
) -> None:
    leader_fleet = LocalFleet(database_url, tmp_path / "state", [], env=FAST)
    fleets.append(leader_fleet)
    leader_fleet.start_producer("leader")
    wait_for(lambda: status_json(database_url)["up"], 20, "the producer seen up")

    # A standby with a metrics endpoint: a dead leader cannot export its own "down".
    port = free_port()
    standby_fleet = LocalFleet(
        database_url,
        tmp_path / "state",
        [],
        env={**FAST, "SCRAPEFLEET_METRICS_PORT": str(port)},
        log_dir=tmp_path / "standby-logs",
    )
    fleets.append(standby_fleet)
    standby_fleet.start_producer("standby")
    wait_for(
        lambda: producer_metrics(port).get("scrapefleet_producer_up") == 1.0,
        20,
        "the standby's metrics to say the producer is up",
    )
    up = status_json(database_url)
    leader_pid = leader_fleet.processes["leader"].pid
    standby_pid = standby_fleet.processes["standby"].pid
    assert up["leader"]["pid"] == leader_pid and up["leader"]["role"] == "leader"
    assert [(s["pid"], s["up"]) for s in up["standbys"]] == [(standby_pid, True)]

    waiter = LockWaiter(engine)
    try:
        leader_fleet.signal("leader", signal.SIGKILL)
        leader_fleet.processes["leader"].wait(10)
        wait_for(waiter.holding.is_set, 10, "the dead leader's lock, kept by the test")

        down = wait_for(
            lambda: _when(status_json(database_url), lambda got: not got["up"]),
            DOWN_WITHIN_S,
            "scrapefleet status --json to say the producer is down",
        )
        assert down["down_since"] == down["last_cycle_at"] is not None
        assert down["leader"]["pid"] == leader_pid
        assert [(s["pid"], s["up"]) for s in down["standbys"]] == [(standby_pid, True)]
        text = run_cli(["status"], database_url).stdout
        assert text.startswith("producer down since "), text

        dashboard = create_app(load_settings(None, database_url=database_url), engine)
        page = dashboard.test_client().get("/").get_data(as_text=True)
        assert 'id="producer-down"' in page and "producer down since" in page
        assert "Assignment is running." not in page

        metrics = wait_for(
            lambda: _when(producer_metrics(port), lambda m: m.get("scrapefleet_producer_up") == 0),
            2 * INTERVAL_S + 1.0,
            "the standby's metrics to say the producer is down",
        )
        assert metrics["scrapefleet_producer_last_cycle_timestamp_seconds"] > 0
    finally:
        waiter.close()
    # Once the lock is free the standby takes over, and everything says up again.
    wait_for(lambda: status_json(database_url)["up"], 20, "the standby to take over")
