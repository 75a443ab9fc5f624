"""Profiles against real PostgreSQL: submit, the producer's binding and one-at-a-time rule, the
cool-down after a block, and the operator's `scrapefleet profiles` commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.cli_helpers import run_cli
from tests.integration.producer_helpers import (
    add_hosts,
    producer_settings,
    publish_status,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def producer(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[Producer]:
    """A producer over hosts h1 and h2, both active and idle."""
    add_hosts(engine, {"h1": 6, "h2": 6})
    for host in ("h1", "h2"):
        publish_status(tmp_path, host)
    made = Producer(producer_settings(database_url, tmp_path), engine)
    yield made
    made.stop()


def _page(profile: str | list[str]) -> NewJob:
    return NewJob("fetch_page", {"url": "http://127.0.0.1/", "browser": {"profile": profile}})


def _jobs(engine: Engine) -> dict[int, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, status, host, profile, profile_pool FROM jobs ORDER BY id")
        )
        return {r.id: dict(r._mapping) for r in rows}


def _profile(engine: Engine, name: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return {r["name"]: r for r in store.list_profiles(conn)}[name]


def _finish(engine: Engine, job_id: int) -> None:
    """The job's host claims it and completes it."""
    host = _jobs(engine)[job_id]["host"]
    with engine.begin() as conn:
        claimed = {job.id: job for job in store.claim_jobs(conn, host, 6).jobs}
        assert claimed[job_id].profile == _jobs(engine)[job_id]["profile"]
        store.complete_job(conn, host, job_id, claimed[job_id].claim, {})


def test_a_profiles_jobs_run_one_at_a_time_on_the_host_it_is_bound_to(
    engine: Engine, producer: Producer
) -> None:
    ids = submit(engine, [_page("acct-7") for _ in range(3)])
    assert _jobs(engine)[ids[0]]["profile_pool"] == ["acct-7"]

    assert producer.run_cycle().assigned == 1
    first = _jobs(engine)[ids[0]]
    bound = first["host"]
    assert first["status"] == "queued" and first["profile"] == "acct-7"
    assert producer.run_cycle().assigned == 0  # the profile is held: the others wait
    # The bound host is made the busier one: the profile's next job still goes there.
    submit(engine, [NewJob("noop") for _ in range(4)])
    producer.run_cycle()
    for job_id in ids:
        _finish(engine, job_id)
        if job_id != ids[-1]:
            assert producer.run_cycle().assigned >= 1
    assert {_jobs(engine)[i]["host"] for i in ids} == {bound}
    row = _profile(engine, "acct-7")
    assert (row["host"], row["jobs"], row["state"]) == (bound, 3, "ready")


def test_a_profile_whose_host_is_not_active_waits_until_it_is_moved(
    engine: Engine, producer: Producer, database_url: str
) -> None:
    first, second = submit(engine, [_page("acct-7"), _page("acct-7")])
    producer.run_cycle()
    _finish(engine, first)
    bound = _jobs(engine)[first]["host"]
    other = "h2" if bound == "h1" else "h1"
    with engine.begin() as conn:
        store.drain_host(conn, bound)

    assert producer.run_cycle().assigned == 0
    assert _jobs(engine)[second]["status"] == "pending"

    moved = run_cli(["profiles", "move", "acct-7", "--to", other], database_url)
    assert moved.returncode == 0, moved.stderr
    assert producer.run_cycle().assigned == 1
    assert _jobs(engine)[second]["host"] == other


def test_a_blocked_pool_job_cools_its_profile_and_runs_under_another(
    engine: Engine, producer: Producer
) -> None:
    (job_id,) = submit(engine, [_page(["acct-1", "acct-2"])])
    producer.run_cycle()
    first = _jobs(engine)[job_id]
    assert first["profile"] == "acct-1"
    with engine.begin() as conn:
        (claimed,) = store.claim_jobs(conn, first["host"], 6).jobs
        # The release path of a blocked attempt: the job goes back, its profile cools down.
        assert store.cool_profile_after_block(conn, job_id, 600) == "acct-1"
        assert store.release_job(conn, first["host"], job_id, claimed.claim, "blocked")

    assert producer.run_cycle().assigned == 1
    assert _jobs(engine)[job_id]["profile"] == "acct-2"
    cooled = _profile(engine, "acct-1")
    assert cooled["state"] == "cooling" and cooled["blocks"] == 1
    assert cooled["cooldown_until"] > datetime.now(UTC) + timedelta(seconds=500)


def test_a_profiles_cool_down_doubles_per_block_in_a_row_until_a_success(
    engine: Engine, producer: Producer
) -> None:
    (job_id,) = submit(engine, [_page("acct-9")])
    producer.run_cycle()
    lengths = []
    with engine.begin() as conn:
        for _ in range(3):
            assert store.cool_profile_after_block(conn, job_id, 100, 300) == "acct-9"
            row = conn.execute(
                sa.text(
                    "SELECT consecutive_blocks, extract(epoch FROM cooldown_until - now()) AS s"
                    " FROM profiles WHERE name = 'acct-9'"
                )
            ).one()
            lengths.append((row.consecutive_blocks, round(float(row.s))))
    assert lengths == [(1, 100), (2, 200), (3, 300)]  # doubled, then held at the longest
    with engine.begin() as conn:
        store.profile_succeeded(conn, job_id)  # its job completed: the back-off starts over
        store.cool_profile_after_block(conn, job_id, 100, 300)
        again = conn.execute(
            sa.text("SELECT consecutive_blocks FROM profiles WHERE name = 'acct-9'")
        ).scalar()
    assert again == 1


def test_a_job_without_a_profile_cools_nothing(engine: Engine, producer: Producer) -> None:
    (job_id,) = submit(engine, [NewJob("noop")])
    with engine.begin() as conn:
        assert store.cool_profile_after_block(conn, job_id, 600) is None


# ---------------------------------------------------------------- the operator's commands


def test_list_cool_and_reset(engine: Engine, producer: Producer, database_url: str) -> None:
    submit(engine, [_page("acct-7")])
    producer.run_cycle()

    cooled = run_cli(["profiles", "cool", "acct-7", "--for", "2h"], database_url)
    assert cooled.returncode == 0, cooled.stderr
    assert "cooling until" in cooled.stdout
    until = _profile(engine, "acct-7")["cooldown_until"]
    assert timedelta(minutes=119) < until - datetime.now(UTC) <= timedelta(hours=2)

    listed = run_cli(["profiles", "list"], database_url)
    assert listed.returncode == 0, listed.stderr
    (line,) = [x for x in listed.stdout.splitlines() if x.startswith("acct-7")]
    assert "cooling 1h5" in line and " 1 " in line  # ~2 h left; one job

    reset = run_cli(["profiles", "reset", "acct-7"], database_url)
    assert reset.returncode == 0, reset.stderr
    row = _profile(engine, "acct-7")
    assert (row["state"], row["cooldown_until"], row["blocks"]) == ("ready", None, 0)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["reset", "nobody"], 1, "no profile named 'nobody'"),
        (["cool", "nobody", "--for", "1h"], 1, "no profile named 'nobody'"),
        (["move", "nobody", "--to", "h2"], 1, "no profile named 'nobody'"),
        (["move", "acct-7", "--to", "h9"], 1, "no host named 'h9'"),
        (["cool", "acct-7", "--for", "soon"], 2, "--for 'soon': not a duration"),
        (["cool", "acct-7", "--for", "0m"], 2, "must be more than 0 s"),
        (["move", "acct-7", "--to", "h2"], 2, "is queued or running on"),
    ],
)
def test_a_command_that_does_nothing_says_why_and_exits_non_zero(
    engine: Engine, producer: Producer, database_url: str, args: list[str], code: int, message: str
) -> None:
    submit(engine, [_page("acct-7")])
    producer.run_cycle()  # acct-7 exists, bound, with its job queued
    before = _profile(engine, "acct-7")

    done = run_cli(["profiles", *args], database_url)

    assert done.returncode == code, done.stdout
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert _profile(engine, "acct-7") == before


def test_list_says_when_there_is_no_profile(engine: Engine, database_url: str) -> None:
    listed = run_cli(["profiles", "list"], database_url)
    assert listed.returncode == 0 and "no profiles yet" in listed.stdout


def test_a_profile_name_with_path_characters_is_refused_at_submit(
    engine: Engine, database_url: str
) -> None:
    line = {"kind": "fetch_page", "payload": {"url": "http://x/", "browser": {"profile": "../x"}}}
    good = {"kind": "fetch_page", "payload": {"url": "http://x/", "browser": {"profile": "ok"}}}
    stdin = json.dumps(good) + "\n" + json.dumps(line) + "\n"

    done = run_cli(["submit", "-"], database_url, stdin=stdin)

    assert done.returncode == 2
    assert "line 2: payload.browser.profile: '../x' is not a profile name" in done.stderr
    assert _jobs(engine) == {}
