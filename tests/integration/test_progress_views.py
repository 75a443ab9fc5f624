"""The 7am views against real PostgreSQL, fed by the store's own moves (claims, completions,
failures, releases, rescues), and `scrapefleet status` saying the same in one line."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.reads.progress import read_progress, read_rows, render_progress
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.common.store.producing.fleet import ProducerIdentity
from tests.cli_helpers import run_cli
from tests.waiting import scaled

_PRODUCER = ProducerIdentity("p1", "host-a", 4242, "9.9.9", 2.0, True)

pytestmark = pytest.mark.timeout(60)


def _run_on(engine: Engine, host: str, kind: str, count: int) -> list[tuple[int, int]]:
    """``count`` new jobs of ``kind`` assigned to and claimed by ``host``: (id, attempt)."""
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob(kind)] * count, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, host) for i in ids])
        claimed = store.claim_jobs(conn, host, count).jobs
    return [(job.id, job.attempt) for job in claimed]


def _fail(engine: Engine, host: str, jobs: list[tuple[int, int]], error: str) -> None:
    with engine.begin() as conn:
        for job_id, attempt in jobs:
            store.fail_attempt(conn, host, job_id, attempt, error, retry_at=None)


@pytest.fixture
def fleet(engine: Engine) -> dict[str, Any]:
    with engine.begin() as conn:
        for name in ("h1", "h2"):
            store.add_host(conn, HostSpec(name=name, capacity=6))
    ok = _run_on(engine, "h1", "prices", 4)
    with engine.begin() as conn:
        store.complete_jobs(conn, "h1", [(i, a, {"ok": True}) for i, a in ok])
    # Two failures that differ only by URL and number: one group.
    bad = _run_on(engine, "h2", "prices", 2)
    for n, job in enumerate(bad):
        _fail(
            engine,
            "h2",
            [job],
            f"Traceback ...\nTimeoutError: https://shop.example/item/{n} 3{n} s",
        )
    other = _run_on(engine, "h2", "reviews", 1)
    _fail(engine, "h2", other, "Traceback ...\nValueError: no price on the page")
    [(released, attempt)] = _run_on(engine, "h1", "prices", 1)
    with engine.begin() as conn:
        store.release_job(conn, "h1", released, attempt, "released: browser stack failed")
        store.insert_jobs(conn, [NewJob("prices")] * 5, default_max_attempts=3)
        conn.execute(
            sa.text(
                "UPDATE jobs SET created_at = now() - interval '90 seconds'"
                " WHERE status = 'pending'"
            )
        )
    return {"ok": ok, "bad": bad, "other": other}


def test_progress_counts_the_rate_and_the_eta(engine: Engine, fleet: dict[str, Any]) -> None:
    with engine.begin() as conn:
        store.record_leader_cycle(conn, _PRODUCER, 0.01)  # no ETA while the producer is down
        row = read_progress(conn)
    # 6 pending (5 new + the released one), 4 completed in the last 5 minutes.
    assert (row["remaining"], row["pending"], row["processing"]) == (6, 6, 0)
    assert float(row["completed_per_min_5m"]) == 0.8  # 4 in 5 minutes
    assert row["eta"] == timedelta(seconds=6 * 300 / 4)
    assert timedelta(seconds=89) < row["oldest_pending_age"] < timedelta(seconds=120)
    line = render_progress(row, producer_up=True)
    assert line.startswith("progress: 6 left (pending 6, queued 0, running 0); 0.8/min over 5 min")
    assert "ETA 7m30s" in line and "oldest pending waits 1m" in line


def test_outcomes_per_host_and_kind_survive_the_jobs_moving_on(
    engine: Engine, fleet: dict[str, Any]
) -> None:
    with engine.connect() as conn:
        hosts = {r["host"]: r for r in read_rows(conn, "host_outcomes")}
        kinds = {r["kind"]: r for r in read_rows(conn, "kind_outcomes")}
    assert (hosts["h1"]["completed_1h"], hosts["h1"]["failed_1h"]) == (4, 0)
    assert hosts["h1"]["released_1d"] == 1 and float(hosts["h1"]["failure_rate_1d"]) == 0
    assert (hosts["h2"]["completed_1d"], hosts["h2"]["failed_1d"]) == (0, 3)
    assert float(hosts["h2"]["failure_rate_1d"]) == 1
    assert (kinds["prices"]["completed_1h"], kinds["prices"]["failed_1h"]) == (4, 2)
    assert kinds["reviews"]["failed_1d"] == 1


def test_failures_group_by_masked_message_with_an_example(
    engine: Engine, fleet: dict[str, Any]
) -> None:
    with engine.connect() as conn:
        groups = read_rows(conn, "failure_groups")
    first = groups[0]
    assert (first["kind"], first["error"], first["jobs"]) == (
        "prices",
        "TimeoutError: <url> <n> s",
        2,
    )
    assert first["example_job"] in [i for i, _ in fleet["bad"]]
    assert first["example_error"].startswith("TimeoutError: https://shop.example/item/")
    assert [g["error"] for g in groups[1:]] == ["ValueError: no price on the page"]


def test_status_says_it_in_one_line_and_in_json(
    engine: Engine, database_url: str, fleet: dict[str, Any]
) -> None:
    with engine.begin() as conn:
        store.record_leader_cycle(conn, _PRODUCER, 0.01)
    text = run_cli(["status"], database_url)
    assert text.returncode == 0, text.stderr
    assert "progress: 6 left (pending 6, queued 0, running 0)" in text.stdout
    document = json.loads(run_cli(["status", "--json"], database_url).stdout)
    progress = document["progress"]
    assert progress["remaining"] == 6 and progress["eta_s"] == 450.0
    assert progress["stalled_reason"] is None
    assert progress["oldest_pending_age_s"] >= 89
    assert document["verdict"] == {"exit_code": 0, "name": "healthy"}


def test_status_exits_3_and_says_stalled_with_the_producer_down(
    engine: Engine, database_url: str, fleet: dict[str, Any]
) -> None:
    text = run_cli(["status"], database_url)
    assert text.returncode == 3, text.stderr
    assert "stalled: the producer is down" in text.stdout and "ETA" not in text.stdout
    printed = run_cli(["status", "--json"], database_url)
    assert printed.returncode == 3
    document = json.loads(printed.stdout)
    assert document["verdict"]["name"] == "producer_down"
    assert document["progress"]["stalled_reason"].startswith("the producer is down")


def test_status_exits_4_when_work_is_pending_and_no_host_is_active(
    engine: Engine, database_url: str, fleet: dict[str, Any]
) -> None:
    with engine.begin() as conn:
        store.record_leader_cycle(conn, _PRODUCER, 0.01)
        conn.execute(sa.text("UPDATE hosts SET state = 'disabled'"))
    text = run_cli(["status"], database_url)
    assert text.returncode == 4, text.stderr
    assert "progress: 6 left" in text.stdout


def test_no_eta_when_nothing_completed_in_five_minutes(
    engine: Engine, fleet: dict[str, Any]
) -> None:
    """The hour's rate is not an ETA: a fleet that stopped finishing says it is stalled."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET finished_at = now() - interval '12 minutes'"
                " WHERE status = 'completed'"
            )
        )
        row = read_progress(conn)
    assert row["eta"] is None and float(row["completed_per_min_60m"]) > 0
    line = render_progress(row, producer_up=True)
    assert "ETA" not in line
    assert "stalled: nothing completed in the last 5 min (last at " in line


def test_status_totals_agree_while_jobs_move(engine: Engine, fleet: dict[str, Any]) -> None:
    """Every part of `status` is one snapshot: the progress line's total is the per-status
    counts' total, read while another connection moves jobs between statuses."""
    from scrapefleet.common.ops.fleet_status import read_fleet_status

    stop = threading.Event()

    def move() -> None:
        while not stop.is_set():
            with engine.begin() as conn:
                ids = store.insert_jobs(conn, [NewJob("churn")] * 3, default_max_attempts=3).ids
            with engine.begin() as conn:
                store.assign_jobs(conn, [(i, "h1") for i in ids])
            with engine.begin() as conn:
                claimed = store.claim_jobs(conn, "h1", 3).jobs
            with engine.begin() as conn:
                store.complete_jobs(conn, "h1", [(j.id, j.attempt, {}) for j in claimed])

    mover = threading.Thread(target=move, daemon=True)
    mover.start()
    try:
        for _ in range(40):
            with engine.connect() as conn:
                status = read_fleet_status(conn)
            counted = sum(status.counts.get(s, 0) for s in ("pending", "queued", "processing"))
            assert int(status.progress["remaining"]) == counted
    finally:
        stop.set()
        mover.join(timeout=scaled(10))


def test_status_codes_stay_apart_in_failure_groups(engine: Engine) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
    for code in (404, 404, 500):
        _fail(engine, "h1", _run_on(engine, "h1", "pages", 1), f"HTTP {code} from https://a/{code}")
    with engine.connect() as conn:
        groups = {g["error"]: g["jobs"] for g in read_rows(conn, "failure_groups")}
    assert groups == {"HTTP 404 from <url>": 2, "HTTP 500 from <url>": 1}


def test_throughput_per_hour_shows_empty_hours_as_zero(
    engine: Engine, fleet: dict[str, Any]
) -> None:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM throughput_per_hour")).all()
    assert len(rows) == 7 * 24  # every hour of the 7 days, the current one included
    assert rows[0].completed == 4  # newest first: this hour
    assert all(r.completed == 0 and r.failed == 0 for r in rows[1:])


def test_an_empty_fleet_has_nothing_left_and_no_eta(engine: Engine) -> None:
    with engine.connect() as conn:
        row = read_progress(conn)
    assert row["remaining"] == 0 and row["oldest_pending_age"] is None
    line = render_progress(row, producer_up=True)
    assert line == "progress: nothing left; 0.0/min over 5 min, 0.0/min over 1 h"
    assert datetime.now(UTC)  # the views need no clock of ours: now() is the server's


def test_recent_failures_links_the_network_log(engine: Engine, fleet: dict[str, Any]) -> None:
    [(job_id, attempt)] = _run_on(engine, "h1", "prices", 1)
    network = "/var/lib/scrapefleet/artifacts/9/attempt-1.network.json"
    with engine.begin() as conn:
        store.fail_attempt(
            conn, "h1", job_id, attempt, "ValueError: x", retry_at=None,
            artifacts={"network": network, "screenshot": "s.png"},
        )  # fmt: skip
        row = conn.execute(
            sa.text("SELECT network_log, screenshot FROM recent_failures WHERE job_id = :id"),
            {"id": job_id},
        ).one()
    assert (row.network_log, row.screenshot) == (network, "s.png")


def test_sick_hosts_puts_the_dead_and_the_rescued_first(
    engine: Engine, fleet: dict[str, Any]
) -> None:
    """A dead host has no recent outcomes, so a failure-rate order put it last; h2 fails every
    job it runs (rate 1.0) and still comes after the offline host and the one with rescues."""
    with engine.begin() as conn:
        for name in ("h3", "h4"):
            store.add_host(conn, HostSpec(name=name, capacity=6))
    [(job_id, _)] = _run_on(engine, "h4", "prices", 1)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes' WHERE id = :id"),
            {"id": job_id},
        )
        assert store.rescue_stale_processing(conn, 60) == [job_id]
        store.set_host_state(conn, "h3", "offline", "probe failed: connection refused")
        rows = conn.execute(sa.text("SELECT host, why FROM sick_hosts")).all()
    assert [r.host for r in rows] == ["h3", "h4", "h2", "h1"]
    assert rows[0].why.startswith("offline since ") and rows[0].why.endswith("connection refused")
    assert rows[1].why.startswith("1 job(s) rescued in a day")
    assert rows[2].why == "100% of its attempts failed in a day"
    assert rows[3].why is None


def test_jobs_rescued_from_a_host_are_found_by_it(
    engine: Engine, database_url: str, fleet: dict[str, Any]
) -> None:
    [(job_id, _)] = _run_on(engine, "h2", "prices", 1)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes' WHERE id = :id"),
            {"id": job_id},
        )
        assert store.rescue_stale_processing(conn, 60) == [job_id]
        store.assign_jobs(conn, [(job_id, "h1")])  # it moves on: jobs.host is h1 now

    def listed(*args: str) -> list[int]:
        answer = run_cli(["jobs", "list", "--json", *args], database_url)
        assert answer.returncode == 0, answer.stderr
        return sorted(json.loads(line)["id"] for line in answer.stdout.splitlines())

    was_on_h2 = listed("--was-on", "h2")
    assert job_id in was_on_h2 and job_id not in listed("--host", "h2")
    assert sorted(i for i, _ in fleet["bad"] + fleet["other"]) == [
        i for i in was_on_h2 if i != job_id
    ]

    # The dashboard: the host page links its rescued jobs, the job search has the same filter.
    client = create_app(load_settings(None, database_url=database_url), engine).test_client()
    host_page = client.get("/hosts/h2").get_data(as_text=True)
    assert 'class="rescued" href="/jobs?was_on=h2&amp;rescued=1"' in host_page
    rescued = client.get("/jobs?was_on=h2&rescued=1").get_data(as_text=True)
    assert re.findall(r'href="/jobs/(\d+)"', rescued) == [str(job_id)]
    everything = client.get("/jobs?was_on=h2").get_data(as_text=True)
    assert sorted(int(i) for i in re.findall(r'href="/jobs/(\d+)"', everything)) == was_on_h2
    assert client.get("/jobs?rescued=1").status_code == 400


def test_failures_command_lists_the_groups_with_an_example(
    engine: Engine, database_url: str, fleet: dict[str, Any]
) -> None:
    listed = run_cli(["failures"], database_url)
    assert listed.returncode == 0, listed.stderr
    header, first, second = listed.stdout.splitlines()
    assert header.split()[:3] == ["jobs", "kind", "class"]
    assert first.split()[:3] == ["2", "prices", "transient"]
    assert first.endswith("TimeoutError: <url> <n> s") and "ValueError" in second
    as_json = [
        json.loads(x) for x in run_cli(["failures", "--json"], database_url).stdout.split("\n") if x
    ]
    assert [g["jobs"] for g in as_json] == [2, 1]


def test_failures_command_says_when_there_are_none(engine: Engine, database_url: str) -> None:
    done = run_cli(["failures"], database_url)
    assert done.returncode == 1 and "no job failed in the last 7 days" in done.stderr


def test_failures_command_masks_a_password_in_its_example(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
    error = "ProxyError: cannot connect to http://bob:s3cret-pw@proxy.test:8080/"
    _fail(engine, "h1", _run_on(engine, "h1", "pages", 1), error)
    listed = run_cli(["failures", "--json"], database_url)
    assert listed.returncode == 0, listed.stderr
    assert "s3cret-pw" not in listed.stdout and "proxy.test" in listed.stdout
