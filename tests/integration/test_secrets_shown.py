"""A job's secrets never shown back: its proxy password, cookie values, credential headers and
URL tokens are masked by `jobs show`, `jobs list --json`, `results export` (unless asked with
--show-secrets) and the dashboard's job page, against real PostgreSQL and the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import NewJob
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.timeout(120)

SECRETS = ("hunter2", "s3ss10nvalue", "Bearer-abcdef123", "k3y-0f-the-api", "t0k3n-in-url")
PAYLOAD: dict[str, Any] = {
    "url": "https://example.test/page?token=t0k3n-in-url&page=2",
    "proxy": "http://scraper:hunter2@proxy.test:3128",
    "headers": {"Authorization": "Bearer Bearer-abcdef123", "X-Api-Key": "k3y-0f-the-api"},
    "cookies": {"session": "s3ss10nvalue"},
    "browser": {"proxy": "http://scraper:hunter2@proxy.test:3128"},
}


@pytest.fixture
def job_id(engine: Engine) -> int:
    with engine.begin() as conn:
        (new,) = store.insert_jobs(
            conn,
            [
                NewJob(
                    "http_get",
                    payload=PAYLOAD,
                    callback_url="https://hook.test/?key=k3y-0f-the-api",
                )
            ],
            default_max_attempts=1,
        ).ids
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'failed', finished_at = now(),"
                " last_error = 'ProxyError: cannot reach http://scraper:hunter2@proxy.test:3128'"
                " WHERE id = :id"
            ),
            {"id": new},
        )
    return int(new)


def _no_secret(text: str) -> None:
    shown = [secret for secret in SECRETS if secret in text]
    assert not shown, f"shown in clear: {shown}\n{text}"


def test_jobs_show_masks_the_payload_the_callback_and_the_error(
    job_id: int, database_url: str
) -> None:
    shown = run_cli(["jobs", "show", str(job_id)], database_url)
    assert shown.returncode == 0, shown.stderr
    _no_secret(shown.stdout)
    # what is not a secret is still there to read
    assert "proxy.test:3128" in shown.stdout and "example.test/page" in shown.stdout
    assert '"session": "***"' in shown.stdout


def test_jobs_list_json_masks_the_payload(job_id: int, database_url: str) -> None:
    listed = run_cli(["jobs", "list", "--json"], database_url)
    assert listed.returncode == 0, listed.stderr
    _no_secret(listed.stdout)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["payload"]["headers"] == {"Authorization": "***", "X-Api-Key": "***"}


def test_an_export_masks_unless_asked_to_show_secrets(
    job_id: int, database_url: str, tmp_path: Path
) -> None:
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"masked.{fmt}"
        done = run_cli(["results", "export", "--format", fmt, "-o", str(out)], database_url)
        assert done.returncode == 0, done.stderr
        _no_secret(out.read_text())
    clear = tmp_path / "clear.jsonl"
    done = run_cli(["results", "export", "--show-secrets", "-o", str(clear)], database_url)
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in clear.read_text().splitlines()]
    assert row["payload"] == PAYLOAD


def test_the_dashboards_job_page_masks_them(job_id: int, engine: Engine, database_url: str) -> None:
    settings = load_settings(None, database_url=database_url)
    client = create_app(settings, engine).test_client()
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    _no_secret(text)
    assert "proxy.test:3128" in text


def test_the_dashboard_masks_a_hosts_last_probe_error(engine: Engine, database_url: str) -> None:
    # A probe's error can quote what the host's side printed: a proxy URL with its password.
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO hosts (name, probe_failures, last_probe_error)"
                " VALUES ('leaky', 3, 'status: proxy http://scraper:hunter2@proxy.test:3128 down')"
            )
        )
    settings = load_settings(None, database_url=database_url)
    client = create_app(settings, engine).test_client()
    for path in ("/", "/hosts/leaky"):
        page = client.get(path)
        assert page.status_code == 200, path
        text = page.get_data(as_text=True)
        _no_secret(text)
        assert "3 failed" in text, path
    assert "proxy.test:3128" in client.get("/hosts/leaky").get_data(as_text=True)
