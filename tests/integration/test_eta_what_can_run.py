"""The ETA comes from what can actually run: a rate limit sets a floor under it, and work that
nothing will run (a key an operator paused, a kind no active host runs, the producer down)
gives no ETA but a reason, in the ``progress`` view, in `status` and in `status --json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.jobs.rate_limits import RateLimit
from scrapefleet.common.reads.progress import read_progress
from scrapefleet.common.store import HostSpec, NewJob
from scrapefleet.common.store.operating.controls import ControlChange, Scope, change_control
from scrapefleet.common.store.producing.fleet import ProducerIdentity
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.timeout(60)

_PRODUCER = ProducerIdentity("p1", "host-a", 4242, "9.9.9", 2.0, True)


def _fleet(engine: Engine, *, pending: int, kind: str = "prices", key: str = "shop") -> None:
    """One active host, 300 jobs of ``key`` completed in the last 5 minutes (60/min),
    ``pending`` more waiting on the same key, and a producer cycling."""
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
        store.record_leader_cycle(conn, _PRODUCER, 0.01)
        ids = store.insert_jobs(
            conn, [NewJob(kind, rate_key=key)] * 300, default_max_attempts=3
        ).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
        claimed = store.claim_jobs(conn, "h1", 300).jobs
        store.complete_jobs(conn, "h1", [(j.id, j.attempt, {}) for j in claimed])
        store.insert_jobs(conn, [NewJob(kind, rate_key=key)] * pending, default_max_attempts=3)


@pytest.mark.parametrize("named", [True, False], ids=["its own limit", "the default limit"])
def test_a_per_minute_limit_is_a_floor_under_the_eta(engine: Engine, named: bool) -> None:
    """258 jobs on a key limited to 30 a minute take at least 8.6 minutes, whatever the rate
    of the last 5 minutes says (at 60/min: 4.3 min)."""
    _fleet(engine, pending=258)
    with engine.begin() as conn:
        limit = RateLimit(per_minute=30)
        if named:
            store.save_rate_keys(conn, {"shop": limit}, None, {}, datetime.now(UTC))
        else:
            store.save_rate_keys(conn, {}, limit, {}, datetime.now(UTC))
        row = read_progress(conn)
    assert row["eta"] >= timedelta(minutes=258 / 30)
    assert row["no_eta_reason"] is None


def test_a_paused_key_gives_no_eta_but_says_why_and_status_exits_5(
    engine: Engine, database_url: str
) -> None:
    _fleet(engine, pending=40)
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("other")] * 3, default_max_attempts=3)
        assert change_control(conn, Scope.KIND, "other", ControlChange.PAUSE, "ann", None)
        assert change_control(conn, Scope.RATE_KEY, "shop", ControlChange.PAUSE, "ann", None)
        row = read_progress(conn)
    assert row["eta"] is None and row["held"] == 43
    assert row["no_eta_reason"] == (
        "40 job(s) of rate key 'shop' paused by an operator;"
        " 3 job(s) of kind 'other' paused by an operator"
    )
    with engine.begin() as conn:
        assert change_control(conn, Scope.KIND, "other", ControlChange.RESUME, "ann", None)
    answer = run_cli(["status"], database_url)
    assert answer.returncode == 5, answer.stdout + answer.stderr
    assert "; ETA " not in answer.stdout
    assert "no ETA: 40 job(s) of rate key 'shop' paused by an operator" in answer.stdout
    document = json.loads(run_cli(["status", "--json"], database_url).stdout)
    assert document["progress"]["eta_s"] is None
    assert document["verdict"] == {"exit_code": 5, "name": "work_held"}


def test_a_kind_no_active_host_runs_gives_no_eta_and_status_exits_4(
    engine: Engine, database_url: str
) -> None:
    _fleet(engine, pending=10, kind="prices")
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h2", capacity=6))
        conn.execute(sa.text("""UPDATE hosts SET kinds = '{"pages": null}' WHERE name = 'h1'"""))
        conn.execute(
            sa.text(
                """UPDATE hosts SET kinds = '{"prices": null}', state = 'offline'"""
                " WHERE name = 'h2'"
            )
        )
        row = read_progress(conn)
        hosts = conn.execute(
            sa.text("SELECT host, kinds, not_taking_reason FROM host_load ORDER BY host")
        ).all()
    assert [tuple(h) for h in hosts] == [("h1", ["pages"], None), ("h2", ["prices"], "offline")]
    assert row["eta"] is None and row["held"] == 10
    assert row["no_eta_reason"] == "10 job(s) of kind 'prices': no active host runs it"
    answer = run_cli(["status"], database_url)
    assert answer.returncode == 4, answer.stdout + answer.stderr
    assert "; ETA " not in answer.stdout and "no active host runs kind 'prices'" in answer.stdout


def test_no_eta_in_the_view_or_the_json_while_the_producer_is_down(
    engine: Engine, database_url: str
) -> None:
    _fleet(engine, pending=10)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE producers SET last_cycle_at = now() - interval '5 minutes'"))
        row = read_progress(conn)
    assert row["eta"] is None
    assert row["no_eta_reason"] == "the producer is down, nothing is assigned"
    answer = run_cli(["status", "--json"], database_url)
    assert answer.returncode == 3
    assert json.loads(answer.stdout)["progress"]["eta_s"] is None
