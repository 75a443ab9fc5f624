"""The dashboard's retry and cancel against real PostgreSQL (Flask's test client, no browser):
over BULK_CONFIRM_OVER_JOBS jobs a confirm step shows the count first, and that step keeps every
forgery check; a retry brings back failed jobs only, unless a cancelled job's own page asks."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import NewJob

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOKEN = "dashboard-bulk-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


@pytest.fixture
def client(engine: Engine, database_url: str, tmp_path: Path) -> FlaskClient:
    settings = load_settings(
        None, database_url=database_url, dashboard_token=TOKEN, artifacts_dir=tmp_path
    )
    return create_app(settings, engine).test_client()


def _jobs(engine: Engine, count: int, status: str) -> list[int]:
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob("noop")] * count, default_max_attempts=3).ids
        conn.execute(
            sa.text("UPDATE jobs SET status = :s WHERE id = ANY(:ids)"), {"s": status, "ids": ids}
        )
    return ids


def _count(engine: Engine, status: str) -> int:
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM jobs WHERE status = :s")
        return int(conn.execute(query, {"s": status}).scalar_one())


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no form token on the page"
    return match[1]


def test_a_script_gets_the_count_first_and_confirms_it(client: FlaskClient, engine: Engine) -> None:
    ids = _jobs(engine, 150, "failed")
    form = {"action": "retry", "ids": [str(i) for i in ids]}
    asked = client.post("/control/jobs", data=form, headers=BEARER)
    assert asked.status_code == 200
    page = asked.get_data(as_text=True)
    assert "This would retry <b>150</b> job(s)" in page and 'id="confirm-form"' in page
    assert _count(engine, "failed") == 150  # nothing moved yet
    # A confirmation for fewer jobs than would move is asked again.
    short = client.post("/control/jobs", data={**form, "confirm": "149"}, headers=BEARER)
    assert short.status_code == 200 and _count(engine, "failed") == 150
    done = client.post("/control/jobs", data={**form, "confirm": "150"}, headers=BEARER)
    assert done.status_code == 303
    assert _count(engine, "pending") == 150


def test_the_confirm_step_keeps_the_forgery_checks(client: FlaskClient, engine: Engine) -> None:
    ids = _jobs(engine, 120, "pending")
    csrf = _csrf(client.get("/jobs").get_data(as_text=True))
    form = {"action": "cancel", "ids": [str(i) for i in ids], "token": TOKEN, "next": "/jobs"}
    asked = client.post("/control/jobs", data={**form, "csrf_token": csrf}, headers=SAME_ORIGIN)
    assert asked.status_code == 200
    page = asked.get_data(as_text=True)
    assert "Cancel 120 jobs?" in page
    assert _csrf(page) == csrf  # the confirm form carries the session's form token
    assert 'name="confirm" value="120"' in page
    confirmed = {**form, "confirm": "120"}
    # The confirmed form without its form token, or from another port of this host: refused.
    assert client.post("/control/jobs", data=confirmed, headers=SAME_ORIGIN).status_code == 403
    other_port = {"Sec-Fetch-Site": "same-site"}
    forged = client.post(
        "/control/jobs", data={**confirmed, "csrf_token": csrf}, headers=other_port
    )
    assert forged.status_code == 403
    assert _count(engine, "pending") == 120
    done = client.post("/control/jobs", data={**confirmed, "csrf_token": csrf}, headers=SAME_ORIGIN)
    assert done.status_code == 303 and done.headers["Location"].endswith("/jobs")
    assert _count(engine, "cancelled") == 120


def test_a_retry_brings_back_a_cancelled_job_only_from_its_page(
    client: FlaskClient, engine: Engine
) -> None:
    [cancelled] = _jobs(engine, 1, "cancelled")
    form = {"action": "retry", "ids": str(cancelled)}
    client.post("/control/jobs", data=form, headers=BEARER)
    assert _count(engine, "cancelled") == 1
    notice = client.get(f"/jobs/{cancelled}", headers=BEARER).get_data(as_text=True)
    assert f"retry: 0 of 1 job(s) moved; 1 of 1 job(s) not retried: job {cancelled} is" in notice
    assert 'name="include_cancelled" value="1"' in notice  # the job's own retry button
    client.post("/control/jobs", data={**form, "include_cancelled": "1"}, headers=BEARER)
    assert _count(engine, "pending") == 1


def test_the_journal_line_names_the_jobs_moved(
    client: FlaskClient, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _jobs(engine, 3, "failed")
    form = {"action": "retry", "ids": [str(i) for i in ids]}
    with caplog.at_level(logging.INFO, logger="scrapefleet.common.ops.dashboard"):
        assert client.post("/control/jobs", data=form, headers=BEARER).status_code == 303
    [line] = [r.getMessage() for r in caplog.records if "from the dashboard" in r.getMessage()]
    assert line == f"retry 3 job(s) from the dashboard: {', '.join(map(str, ids))}"
