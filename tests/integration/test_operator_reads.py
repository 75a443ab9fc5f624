"""What an operator reads says what is so: `rate-limits` names an operator's pause, `jobs show`
does not pass the host a job last left for its last host, and `jobs list --was-on H --rescued`
lists only the jobs rescued from H, as the dashboard's filter does."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.common.store.operating.controls import ControlChange, Scope, change_control
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.timeout(60)


def test_rate_limits_names_an_operators_pause(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop", rate_key="shop.test")] * 3, default_max_attempts=3)
        change_control(conn, Scope.RATE_KEY, "shop.test", ControlChange.PAUSE, "cli:ann", "ask")
    for args in (["rate-limits"], ["rate-limits", "--all"]):
        shown = run_cli(args, database_url)
        assert shown.returncode == 0, shown.stderr
        [line] = [x for x in shown.stdout.splitlines() if x.startswith("shop.test")]
        assert line.endswith("paused by an operator (cli:ann: ask)"), line
    [document] = [
        json.loads(x) for x in run_cli(["rate-limits", "--json"], database_url).stdout.splitlines()
    ]
    assert document["operator_paused"] is True


def _rescued_then_moved(engine: Engine) -> tuple[int, int]:
    """A job rescued from h2 and now on h1, and one that completed on h2."""
    with engine.begin() as conn:
        for name in ("h1", "h2"):
            store.add_host(conn, HostSpec(name=name, capacity=6))
        rescued, done = store.insert_jobs(conn, [NewJob("noop")] * 2, default_max_attempts=3).ids
        store.assign_jobs(conn, [(rescued, "h2"), (done, "h2")])
        claimed = store.claim_jobs(conn, "h2", 2).jobs
        store.complete_jobs(conn, "h2", [(j.id, j.attempt, {}) for j in claimed if j.id == done])
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes' WHERE id = :id"),
            {"id": rescued},
        )
        assert store.rescue_stale_processing(conn, 60) == [rescued]
        store.assign_jobs(conn, [(rescued, "h1")])
    return rescued, done


def test_jobs_show_calls_the_host_a_job_left_its_previous_host(
    engine: Engine, database_url: str
) -> None:
    rescued, _ = _rescued_then_moved(engine)
    shown = run_cli(["jobs", "show", str(rescued)], database_url)
    assert shown.returncode == 0, shown.stderr
    assert "last_host" not in shown.stdout
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert "host: h1" in lines and "previous_host: h2" in lines, shown.stdout


def test_jobs_list_was_on_with_rescued_lists_only_the_rescued(
    engine: Engine, database_url: str
) -> None:
    rescued, done = _rescued_then_moved(engine)

    def listed(*args: str) -> list[int]:
        answer = run_cli(["jobs", "list", "--json", *args], database_url)
        assert answer.returncode == 0, answer.stderr
        return sorted(json.loads(line)["id"] for line in answer.stdout.splitlines())

    assert listed("--was-on", "h2") == sorted([rescued, done])
    assert listed("--was-on", "h2", "--rescued") == [rescued]
    lone = run_cli(["jobs", "list", "--rescued"], database_url)
    assert lone.returncode == 2 and "--rescued needs --was-on" in lone.stderr, lone.stderr
