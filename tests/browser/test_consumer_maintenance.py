"""A real Consumer's stack over time: restart and reboot budgets, a Grid killed mid-job, a
stack that will not start."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.settings import load_settings
from scrapefleet.common.status.document import read_status
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser.stack.processes import is_gone
from tests.browser.consumer_helpers import (
    HOST,
    FirstStackChromium,
    assign_due,
    consumer_settings,
    consumer_thread,
    fetch,
    finished,
    finished_unreleased,
    host_events,
    queue_jobs,
    rows,
    scalar,
)
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]


def started_before(engine: Engine, event_id: int) -> int:
    """Jobs claimed before the host_events row ``event_id`` was written."""
    return int(
        scalar(
            engine,
            "SELECT count(*) FROM job_events WHERE to_status = 'processing'"
            " AND at < (SELECT at FROM host_events WHERE id = :e)",
            e=event_id,
        )
    )


def completed_once(engine: Engine, ids: list[int]) -> bool:
    """Every job completed, and exactly once (the audit trail has one such transition)."""
    counts = rows(
        engine,
        "SELECT j.id, j.status, count(e.id) FILTER (WHERE e.to_status = 'completed') AS done"
        " FROM jobs j LEFT JOIN job_events e ON e.job_id = j.id"
        " WHERE j.id = ANY(:ids) GROUP BY j.id, j.status",
        ids=ids,
    )
    return len(counts) == len(ids) and all(r.status == "completed" and r.done == 1 for r in counts)


@pytest.mark.parametrize("every", [5, 20])
def test_restart_after_exactly_restart_every_jobs(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite, every: int
) -> None:
    # The draining restart (overlapped restarts: test_consumer_overlap).
    settings = consumer_settings(
        tmp_path, database_url, capacity=3 if every == 5 else 6, restart_every=every,
        reboot_every=0, overlap_restarts=False,
    )  # fmt: skip
    with consumer_thread(settings, database_url) as consumer, FirstStackChromium(consumer) as old:
        # All queued at once: only the consumer's budget keeps it from claiming more.
        ids = queue_jobs(engine, [fetch(site.url("/item")) for _ in range(every + 2)])
        wait_for(lambda: host_events(engine, "restart"), 240, "a restart event")
        wait_for(lambda: finished_unreleased(engine, ids), 240, "every job to finish")
        assert old.seen, "no Chromium process of the first stack was seen"
        assert old.survivors() == [], "Chromium of the old stack outlived the restart"

    assert completed_once(engine, ids)
    going = [
        e for e in host_events(engine, "state") if e.to_state == "restarting"
    ]  # the moment the budget was spent: nothing claimed after it until the stack was back
    assert started_before(engine, going[0].id) == every
    restart = host_events(engine, "restart")[0]
    assert started_before(engine, restart.id) == every
    details = restart.details
    assert details["killed"] > 0 and details["leftover_pids"] == []
    assert details["pss_before_bytes"] > 0 and details["pss_after_bytes"] > 0
    assert details["duration_s"] > 0
    host = rows(engine, "SELECT * FROM hosts WHERE name = :h", h=HOST)[0]
    assert host.jobs_since_restart == 2


def test_the_shipped_default_restarts_the_whole_stack_after_20_browser_jobs(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    """The design card's policy, as shipped: after 20 browser jobs a new Grid and a new Xvfb
    (the overlapped restart's next stack), and the first stack's processes are gone."""
    defaults = load_settings(None)
    assert (defaults.restart_every, defaults.reboot_every) == (20, 80)
    settings = consumer_settings(tmp_path, database_url, capacity=3)
    assert settings.restart_every == 20 and settings.overlap_restarts

    def first_pids() -> tuple[int, int] | None:
        supervisor = consumer.supervisor
        if supervisor is None or not supervisor.running:
            return None
        grid, xvfb = supervisor.stack.grid_pid, supervisor.stack.xvfb_pid
        return (grid, xvfb) if grid is not None and xvfb is not None else None

    with consumer_thread(settings, database_url) as consumer:
        ids = queue_jobs(engine, [fetch(site.url("/item")) for _ in range(22)])
        before = wait_for(first_pids, 240, "the first stack's Grid and Xvfb")
        old = [psutil.Process(pid) for pid in before]
        wait_for(lambda: finished_unreleased(engine, ids), 300, "22 browser jobs")
        assert completed_once(engine, ids)
        wait_for(lambda: all(is_gone(p) for p in old), 60, "the first Grid and Xvfb to end")
        after = first_pids()
    assert after is not None and after[0] not in before and after[1] not in before
    [restart] = host_events(engine, "restart")
    assert started_before(engine, restart.id) == 20


def test_reboot_after_exactly_reboot_every_jobs_then_a_new_boot(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    calls = tmp_path / "reboots.txt"
    settings = consumer_settings(
        tmp_path, database_url, capacity=2, restart_every=0, reboot_every=4,
        reboot_command=f"sh -c 'echo reboot >> {calls}'",
    )  # fmt: skip
    with consumer_thread(settings, database_url) as consumer:
        ids = queue_jobs(engine, [fetch(site.url("/item")) for _ in range(6)])
        wait_for(calls.exists, 240, "the reboot command")
        assert consumer.state == "rebooting"
        assert finished(engine, ids[:4])
        # The consumer now waits for the reboot, which the test plays below.
    assert calls.read_text() == "reboot\n"
    reboot = host_events(engine, "reboot")[0]
    assert started_before(engine, reboot.id) == 4
    # Its queued jobs went back to pending at once, for other hosts.
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'pending'") == 2
    assert scalar(engine, "SELECT jobs_since_boot FROM hosts WHERE name = :h", h=HOST) == 4

    # The host comes back with a new boot id: the since-boot count starts again.
    settings.boot_id_file.write_text("boot-2\n")
    with consumer_thread(settings, database_url):
        wait_for(lambda: completed_once(engine, ids), 240, "the rest", lambda: assign_due(engine))
    assert calls.read_text() == "reboot\n"
    assert scalar(engine, "SELECT jobs_since_boot FROM hosts WHERE name = :h", h=HOST) == 2


def test_grid_killed_mid_job_recovers_and_loses_no_job(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=3, restart_every=0)
    with consumer_thread(settings, database_url) as consumer:
        # max_attempts 1: a job whose attempt the kill used up would fail, not complete.
        ids = queue_jobs(engine, [fetch(site.url("/item"), wait_for="#late") for _ in range(6)])

        def mid_job() -> bool:
            supervisor = consumer.supervisor
            running = scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'processing'")
            return bool(supervisor and supervisor.running and running >= 2)

        wait_for(mid_job, 240, "jobs running on a started stack")
        assert consumer.supervisor is not None
        grid_pid = consumer.supervisor.stack.grid_pid
        assert grid_pid is not None
        os.kill(grid_pid, signal.SIGKILL)
        wait_for(lambda: completed_once(engine, ids), 240, "every job", lambda: assign_due(engine))
        assert consumer.supervisor.stack.grid_pid != grid_pid

    restart = host_events(engine, "restart")[0]
    assert "stack fault" in restart.details["reason"]


def test_a_stack_that_will_not_start_stops_browser_jobs_only_and_recovers_by_itself(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    """No usable Java: the host stays active and keeps completing other jobs, says why its
    browser is failing, hands its browser jobs back without using an attempt, and takes them
    again by itself once Java is there."""
    java = tmp_path / "java"
    java.symlink_to("/bin/false")
    settings = consumer_settings(
        tmp_path, database_url, java_binary=java, stack_retry_base_s=1.0, stack_retry_max_s=2.0
    )
    with consumer_thread(settings, database_url) as consumer:
        [browser_job] = queue_jobs(engine, [fetch(site.url("/item"))])

        def failing() -> bool:
            try:
                status = read_status(settings.state_dir, HOST)
            except ProbeError:  # not written yet
                return False
            return status.browser == "failing" and bool(status.browser_reason)

        wait_for(failing, 120, "the stack reported failing")
        status = read_status(settings.state_dir, HOST)
        assert "failed to start" in (status.browser_reason or "")
        assert status.browser_retry_at is not None and status.state == "active"
        job_sql = "SELECT status, attempts FROM jobs WHERE id = :id"
        wait_for(
            lambda: rows(engine, job_sql, id=browser_job)[0].status == "pending",
            60,
            "the browser job handed back",
        )
        assert rows(engine, job_sql, id=browser_job)[0].attempts == 0  # released, not failed

        plain = queue_jobs(engine, [NewJob("noop") for _ in range(5)])
        wait_for(lambda: finished(engine, plain), 60, "the noop jobs completed meanwhile")
        host = rows(engine, "SELECT * FROM hosts WHERE name = :h", h=HOST)[0]
        assert host.state == "active" and consumer.state == "active"
        assert len(host_events(engine, "stack_failure")) >= 1

        java.unlink()
        java.symlink_to("/usr/bin/java")  # the prerequisite is back: the next try succeeds
        wait_for(
            lambda: finished(engine, [browser_job]),
            240,
            "the browser job",
            lambda: assign_due(engine),
        )
        assert read_status(settings.state_dir, HOST).browser == "ready"
    row = rows(engine, "SELECT status, attempts FROM jobs WHERE id = :id", id=browser_job)[0]
    assert (row.status, row.attempts) == ("completed", 1)


def test_budgets_count_browser_jobs_only(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    """1 fetch_page + 60 http_get: no restart (HTTP jobs never touch the stack); then 45
    fetch_page with restart_every 20: exactly two restarts (at 20 and 40 browser jobs)."""
    settings = consumer_settings(
        tmp_path, database_url, capacity=6, restart_every=20, reboot_every=0
    )
    with consumer_thread(settings, database_url):
        http = [NewJob("http_get", {"url": site.url("/plain")}) for _ in range(60)]
        first = queue_jobs(engine, [fetch(site.url("/item")), *http])
        wait_for(lambda: finished_unreleased(engine, first), 240, "1 fetch_page and 60 http_get")
        assert completed_once(engine, first)
        assert host_events(engine, "restart") == []
        since = scalar(engine, "SELECT jobs_since_restart FROM hosts WHERE name = :h", h=HOST)
        assert since == 1

        browser = queue_jobs(engine, [fetch(site.url("/item")) for _ in range(45)])
        wait_for(lambda: finished_unreleased(engine, browser), 300, "45 fetch_page")
        assert completed_once(engine, browser)
    assert len(host_events(engine, "restart")) == 2
    assert scalar(engine, "SELECT jobs_since_restart FROM hosts WHERE name = :h", h=HOST) == 6
