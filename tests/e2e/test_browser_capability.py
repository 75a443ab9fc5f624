"""Two consumer hosts and a producer as real processes: a host whose browser stack cannot
start (no usable Java for the Selenium jar) keeps completing other jobs while the browser jobs
complete on the other host, and takes browser jobs again by itself once Java is there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.status.document import read_status
from scrapefleet.common.store import HostSpec, NewJob
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(600)]

FAST = {
    "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
    "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    "SCRAPEFLEET_HEARTBEAT_S": "0.5",
    "SCRAPEFLEET_BACKOFF_BASE_S": "0.1",
    "SCRAPEFLEET_STACK_RETRY_BASE_S": "1",
    "SCRAPEFLEET_STACK_RETRY_MAX_S": "2",
    "SCRAPEFLEET_JOB_TIMEOUT_S": "120",
}


@pytest.fixture
def site() -> Iterator[LocalSite]:
    with LocalSite() as running:
        yield running


def rows(engine: Engine, sql: str, **params: object) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def submit(engine: Engine, jobs: list[NewJob]) -> list[int]:
    with engine.begin() as conn:
        return store.insert_jobs(conn, jobs, default_max_attempts=3).ids


def finished_on(engine: Engine, ids: list[int]) -> dict[int, str] | None:
    """Each job's host once every one has completed; None before."""
    done = rows(
        engine,
        "SELECT id, host FROM jobs WHERE id = ANY(:ids) AND status = 'completed'",
        ids=ids,
    )
    return {r.id: r.host for r in done} if len(done) == len(ids) else None


def test_a_host_without_a_usable_jar_runs_other_jobs_and_recovers_its_browser_by_itself(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    java = tmp_path / "java"
    java.symlink_to("/bin/false")  # the jar cannot run: the stack fails to start
    with engine.begin() as conn:
        for name in ("good", "bad"):
            store.add_host(conn, HostSpec(name=name, capacity=3))
    state_dir = tmp_path / "state"
    fleet = LocalFleet(database_url, state_dir, [], env=FAST, producers=0)
    with fleet:
        fleet.start_consumer("good")
        fleet.start_consumer("bad", {"SCRAPEFLEET_JAVA_BINARY": str(java)})
        fleet.start_producer()

        def reporting(host: str) -> bool:
            try:
                return read_status(state_dir, host).state == "active"
            except ProbeError:  # not written yet
                return False

        # Both up before the first job: else the good host, up first, could take every job.
        wait_for(lambda: reporting("good") and reporting("bad"), 120, "both consumers up")

        def bad_failing() -> bool:
            try:
                return read_status(state_dir, "bad").browser == "failing"
            except ProbeError:
                return False

        # A browser job reaches the bad host too (both look able at first), which finds out.
        pages = submit(engine, [NewJob("fetch_page", {"url": site.url("/item")}) for _ in range(8)])
        try:
            wait_for(bad_failing, 180, "the bad host's browser reported failing")
        except AssertionError as exc:
            tails = "\n".join(f"--- {n}\n{fleet.log_tail(n, 30)}" for n in fleet.processes)
            raise AssertionError(f"{exc}\n{tails}") from None
        others = submit(
            engine,
            [NewJob("noop") for _ in range(12)]
            + [NewJob("http_get", {"url": site.url("/plain")}) for _ in range(12)],
        )
        hosts = wait_for(lambda: finished_on(engine, pages + others), 300, "every job")
        assert {hosts[i] for i in pages} == {"good"}  # browser jobs: the able host only
        assert "bad" in {hosts[i] for i in others}  # the other jobs: both hosts
        attempts = rows(engine, "SELECT attempts FROM jobs WHERE id = ANY(:ids)", ids=pages)
        assert {r.attempts for r in attempts} == {1}  # handed back, never failed
        [bad] = rows(
            engine, "SELECT state, browser_state, browser_reason FROM hosts WHERE name = 'bad'"
        )
        assert bad.state == "active" and bad.browser_state == "failing"
        assert "failed to start" in (bad.browser_reason or "")

        java.unlink()
        java.symlink_to("/usr/bin/java")  # the prerequisite is back: the next try succeeds
        with engine.begin() as conn:  # only the recovered host can take the next ones
            store.drain_host(conn, "good", "test: only bad may take work")
        again = submit(engine, [NewJob("fetch_page", {"url": site.url("/item")}) for _ in range(3)])
        hosts = wait_for(lambda: finished_on(engine, again), 300, "browser jobs on the bad host")
        assert set(hosts.values()) == {"bad"}
        assert read_status(state_dir, "bad").browser == "ready"
