"""The whole scheduler over real SSH: consumer daemons inside network-namespace hosts, the
producer probing them with the product's status command, PostgreSQL on a Unix socket.

See tests/fleet/scheduling.py for the setup and tests/fleet/harness.py for the hosts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scrapefleet.common.db.migrate import upgrade
from scrapefleet.common.local.embedded_db import EmbeddedPostgres
from scrapefleet.common.reads import queries
from scrapefleet.common.status.document import parse_status
from tests.fleet.harness import Fleet
from tests.fleet.scheduling import BIN, CAPACITY, SchedulingFleet
from tests.host_status_factory import status_for
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(60)]

OFFLINE_WITHIN_S = 10.0  # 2 failed probes at 0.3 s, plus a cycle that waits for a slow one
JOBS_DONE_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def database_url_on_socket() -> Iterator[str]:
    """A private PostgreSQL on a Unix socket, which every namespace shares."""
    server = EmbeddedPostgres()
    try:
        url = server.start()
        upgrade(url)
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def three_hosts(fleet_factory: Callable[..., Fleet]) -> Iterator[Fleet]:
    fleet = fleet_factory(3)
    yield fleet
    fleet.close()


@pytest.fixture
def cluster(
    three_hosts: Fleet, database_url_on_socket: str, tmp_path: Path
) -> Iterator[SchedulingFleet]:
    """Healthy hosts, empty tables, three consumers and a producer, all stopped afterwards."""
    cluster = SchedulingFleet(three_hosts, database_url_on_socket, tmp_path)
    try:
        cluster.reset()
        cluster.start_consumers()
        cluster.start_producer()
        yield cluster
    finally:
        cluster.close()


def host_state(cluster: SchedulingFleet, name: str, state: str) -> bool:
    return bool(cluster.host_row(name).state == state)


def queued_to_after(cluster: SchedulingFleet, name: str, since: object) -> list[int]:
    """Jobs the producer queued to ``name`` after ``since`` (audit trail)."""
    rows = cluster.rows(
        "SELECT job_id FROM job_events WHERE to_status = 'queued' AND host = :name AND at > :since",
        name=name,
        since=since,
    )
    return [r.job_id for r in rows]


def offline_at(cluster: SchedulingFleet, name: str) -> object:
    events = [e for e in cluster.host_events(name) if e.to_state == "offline"]
    assert events, f"no offline transition of {name} in host_events"
    return events[-1].at


def test_jobs_spread_over_hosts_within_caps(cluster: SchedulingFleet) -> None:
    ids = cluster.submit(45, sleep_s=0.3)
    worst: dict[str, int] = {}
    worst_reported: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for row in cluster.rows(
                "SELECT host, count(*) AS n FROM jobs"
                " WHERE status IN ('queued', 'processing') GROUP BY host"
            ):
                worst[row.host] = max(worst.get(row.host, 0), row.n)
            for row in cluster.rows("SELECT name, reported_running FROM hosts"):
                reported = row.reported_running or 0
                worst_reported[row.name] = max(worst_reported.get(row.name, 0), reported)
            time.sleep(0.02)  # sampling period

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    finally:
        stop.set()
        sampler.join(5)
    assert max(worst.values()) <= CAPACITY, f"a host got more than its cap: {worst}"
    assert max(worst_reported.values()) <= CAPACITY, f"a host ran too many: {worst_reported}"
    per_host = cluster.completed_by_host(ids)
    assert set(per_host) == {"h1", "h2", "h3"}, per_host
    assert min(per_host.values()) >= len(ids) // 6, f"badly spread: {per_host}"
    assert worst == {"h1": CAPACITY, "h2": CAPACITY, "h3": CAPACITY}, "slots left unused"
    cluster.assert_each_completed_once(ids)


def test_host_down_goes_offline_its_queued_jobs_move_and_it_comes_back(
    cluster: SchedulingFleet,
) -> None:
    h1 = cluster.fleet.hosts["h1"]
    # The host goes down: its consumer dies first, so jobs queued to it stay queued (its
    # last status document still looks healthy for a few seconds), then its sshd.
    cluster.consumers["h1"].kill()
    cluster.consumers["h1"].wait(5)
    ids = cluster.submit(30, sleep_s=0.3)
    stranded = wait_for(
        lambda: [r.id for r in cluster.rows("SELECT id FROM jobs WHERE host = 'h1'")],
        5,
        "jobs queued to h1",
    )
    h1.stop_sshd()
    wait_for(lambda: host_state(cluster, "h1", "offline"), OFFLINE_WITHIN_S, "h1 offline")
    went_offline = offline_at(cluster, "h1")

    wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    cluster.assert_each_completed_once(ids)
    moved = cluster.rows(
        "SELECT id, host, attempts FROM jobs WHERE id = ANY(:ids)", ids=list(stranded)
    )
    assert all(r.host != "h1" and r.attempts == 1 for r in moved), moved  # no attempt used
    assert not queued_to_after(cluster, "h1", went_offline)

    # Audit trail and per-host view: the first failure with its reason, the transition.
    events = cluster.host_events("h1")
    failed = [e for e in events if e.event == "probe_failed"]
    assert failed and failed[0].message, events
    offline = [e for e in events if e.to_state == "offline"]
    assert "consecutive probe failures" in offline[-1].message
    with cluster.engine.connect() as conn:
        view = {row["host"]: row for row in queries.host_load(conn)}
    assert view["h1"]["state"] == "offline" and view["h1"]["last_probe_error"]
    assert view["h1"]["state_reason"].startswith("2 consecutive probe failures")

    # The host is back: sshd and consumer up -> active -> it gets work again.
    h1.start_sshd()
    cluster.start_consumer(h1)
    wait_for(lambda: host_state(cluster, "h1", "active"), OFFLINE_WITHIN_S, "h1 active again")
    # Its consumer marks it active on start; the producer gives it work once its own probe
    # succeeds again (a submit wakes a cycle at once, which uses the last probe round's view).
    wait_for(
        lambda: any(
            e.event == "probe_ok" and e.at > went_offline for e in cluster.host_events("h1")
        ),
        OFFLINE_WITHIN_S,
        "the producer's probe of h1 succeeding again",
    )
    more = cluster.submit(18, sleep_s=0.2)
    wait_for(lambda: cluster.all_completed(more), JOBS_DONE_WITHIN_S, "new jobs completed")
    assert cluster.completed_by_host(more).get("h1", 0) > 0
    back = [e for e in cluster.host_events("h1") if e.at > went_offline]
    assert any(e.event == "probe_ok" for e in back), back
    assert any(e.event == "state" and e.to_state == "active" for e in back), back


def test_swapped_host_key_is_refused_with_reason_others_unaffected(
    cluster: SchedulingFleet,
) -> None:
    h2 = cluster.fleet.hosts["h2"]
    h2.swap_host_key()
    wait_for(lambda: host_state(cluster, "h2", "offline"), OFFLINE_WITHIN_S, "h2 offline")
    went_offline = offline_at(cluster, "h2")
    row = cluster.host_row("h2")
    assert "host key for h2 changed" in row.last_probe_error
    assert "host key for h2 changed" in row.state_reason

    ids = cluster.submit(24, sleep_s=0.2)
    wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    cluster.assert_each_completed_once(ids)
    assert set(cluster.completed_by_host(ids)) == {"h1", "h3"}
    assert not queued_to_after(cluster, "h2", went_offline)
    assert all(cluster.host_row(name).state == "active" for name in ("h1", "h3"))

    # `scrapefleet hosts check` gives the operator the same answer, and changes nothing.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    settings = cluster.producer_settings()
    env |= {
        "SCRAPEFLEET_DATABASE_URL": cluster.database_url,
        "SCRAPEFLEET_SSH_KEY_FILE": str(settings.ssh_key_file),
        "SCRAPEFLEET_SSH_KNOWN_HOSTS_FILE": str(settings.ssh_known_hosts_file),
    }
    refused = subprocess.run(
        [str(BIN / "scrapefleet"), "hosts", "check", "h2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(20),
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert "host key for h2 changed" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    healthy = subprocess.run(
        [str(BIN / "scrapefleet"), "hosts", "check", "h1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(20),
    )
    assert healthy.returncode == 0, healthy.stderr
    assert parse_status(healthy.stdout).host == "h1"


def test_consumer_killed_and_restarted_after_reboot_recovers_its_jobs(
    cluster: SchedulingFleet,
) -> None:
    h3 = cluster.fleet.hosts["h3"]
    old_boot_id = cluster.host_row("h3").boot_id
    ids = cluster.submit(24, sleep_s=1.0)

    def processing_on_h3() -> list[int]:
        rows = cluster.rows("SELECT id FROM jobs WHERE host = 'h3' AND status = 'processing'")
        return [r.id for r in rows]

    wait_for(processing_on_h3, 10, "jobs processing on h3")
    os.kill(cluster.consumers["h3"].pid, signal.SIGKILL)
    cluster.consumers["h3"].wait(5)
    interrupted = processing_on_h3()  # read after the kill: none can finish in between
    assert interrupted
    new_boot_id = cluster.write_boot_id(h3)  # the host rebooted
    cluster.start_consumer(h3)

    wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    cluster.assert_each_completed_once(ids)
    recovered = cluster.rows(
        "SELECT DISTINCT job_id FROM job_events WHERE job_id = ANY(:ids)"
        " AND message LIKE 'interrupted: consumer on h3%'",
        ids=interrupted,
    )
    assert {r.job_id for r in recovered} == set(interrupted)
    # Its old status went stale during the restart, so h3 may have been offline a moment.
    wait_for(lambda: host_state(cluster, "h3", "active"), OFFLINE_WITHIN_S, "h3 active")
    # A probe round that read the old consumer's status may land after the restart: the new
    # boot id is in SQL by the next round.
    wait_for(lambda: cluster.host_row("h3").boot_id == new_boot_id, 10, "new boot id in SQL")
    assert new_boot_id != old_boot_id


def test_garbage_or_silent_status_is_a_probe_failure_producer_keeps_assigning(
    cluster: SchedulingFleet,
) -> None:
    cluster.fleet.hosts["h1"].set_forced_command("echo 'garbage {'")
    cluster.fleet.hosts["h2"].set_forced_command("true")  # prints nothing, exits 0
    for name in ("h1", "h2"):
        wait_for(lambda n=name: host_state(cluster, n, "offline"), OFFLINE_WITHIN_S, f"{name}")
    assert "status is not JSON" in cluster.host_row("h1").last_probe_error
    assert cluster.host_row("h2").last_probe_error == "empty status output"
    producer = cluster.producer
    assert producer is not None
    cycles_before = producer.cycles

    ids = cluster.submit(18, sleep_s=0.2)
    wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    cluster.assert_each_completed_once(ids)
    assert set(cluster.completed_by_host(ids)) == {"h3"}
    assert producer.cycles > cycles_before and producer.is_leader
    assert cluster.host_row("h3").state == "active"


def test_a_poisoned_status_costs_its_host_alone(cluster: SchedulingFleet) -> None:
    """A well-formed status whose values no database column holds (a compromised host's
    answer): that host's probe fails with the field named; the others stay active and get
    every job, each completed once."""
    poisoned = status_for("h1", memory_available_bytes=2**63, running=2**31).to_json()
    assert "'" not in poisoned  # quoted whole for the forced command below
    cluster.fleet.hosts["h1"].set_forced_command(f"echo '{poisoned}'")
    wait_for(lambda: host_state(cluster, "h1", "offline"), OFFLINE_WITHIN_S, "h1 offline")
    error = cluster.host_row("h1").last_probe_error
    assert "status field 'running'" in error and "less than or equal to" in error

    ids = cluster.submit(12, sleep_s=0.1)
    wait_for(lambda: cluster.all_completed(ids), JOBS_DONE_WITHIN_S, "all jobs completed")
    cluster.assert_each_completed_once(ids)
    assert set(cluster.completed_by_host(ids)) <= {"h2", "h3"}
    assert {cluster.host_row(n).state for n in ("h2", "h3")} == {"active"}
