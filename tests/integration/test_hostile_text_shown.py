"""What a consumer wrote reaches the operator as text, never as terminal commands or secrets:
the real CLI (subprocesses) and the dashboard against real PostgreSQL.

A compromised host writes its job's error, artifacts and events: escape sequences there (clear
the screen, set the terminal's title, ``\\r`` over a line to print a fake "all good") used to be
printed raw by ``jobs show`` and ``failures``; a ``Cookie: sid=...`` or an Authorization header
quoted in an error used to be shown as it was.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.errors import JobFailed
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob
from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
OVERWRITE = "\rall good, nothing failed          "
C1 = "\x9b31m"  # CSI as one C1 character
BIDI = "\u202e"
HOSTILE = f"ValueError: no price{CLEAR}{TITLE}{C1}{BIDI}{OVERWRITE}"
SECRET = "s3cr3t-session-value"
LEAKY = (
    "HTTPError: 500 from the site\n"
    f"  request headers: Cookie: sid={SECRET}; theme=dark\n"
    f"Set-Cookie: sid={SECRET}; Path=/; HttpOnly\n"
    f'Authorization: Digest username="bob", response="{SECRET}"\n'
    f"Proxy-Authorization: Basic {SECRET}\n"
    f"RuntimeError: gave up, Cookie: sid={SECRET}"
)
# Any C0 control but newline, DEL, any C1 control, bidi overrides: none may reach a terminal.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _failed_job(engine: Engine, error: str, artifacts: dict[str, str] | None = None) -> int:
    with engine.begin() as conn:
        if not conn.exec_driver_sql("SELECT 1 FROM hosts WHERE name = 'h1'").first():
            store.add_host(conn, HostSpec(name="h1", capacity=2))
        (job_id,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=1).ids
        store.assign_jobs(conn, [(job_id, "h1")])
        (job,) = store.claim_jobs(conn, "h1", 1).jobs
        store.fail_attempt(
            conn, "h1", job.id, job.attempt, error, retry_at=None, artifacts=artifacts
        )
    return job_id


def test_jobs_show_and_failures_spell_control_characters_out(
    engine: Engine, database_url: str
) -> None:
    job_id = _failed_job(engine, HOSTILE, {"title": f"Shop{TITLE}{OVERWRITE}", "html": "/a.html"})
    shown = run_cli(["jobs", "show", str(job_id)], database_url)
    assert shown.returncode == 0, shown.stderr
    assert not RAW_CONTROL.search(shown.stdout), repr(shown.stdout)
    assert "\\x1b[2J" in shown.stdout and "\\x1b]0;owned\\x07" in shown.stdout
    assert "\\rall good" in shown.stdout and "\\x9b31m" in shown.stdout
    assert "\\u202e" in shown.stdout
    artifacts = shown.stdout.split("\nartifacts:\n", 1)[1]
    assert "  title: Shop\\x1b]0;owned\\x07\\rall good" in artifacts

    failures = run_cli(["failures"], database_url)
    assert failures.returncode == 0, failures.stderr
    assert not RAW_CONTROL.search(failures.stdout), repr(failures.stdout)
    listed = run_cli(["jobs", "list", "--status", "failed"], database_url)
    assert listed.returncode == 0, listed.stderr
    assert not RAW_CONTROL.search(listed.stdout), repr(listed.stdout)


def test_cookies_and_credentials_in_an_error_are_masked_everywhere(
    engine: Engine, database_url: str
) -> None:
    job_id = _failed_job(engine, LEAKY)
    shown = run_cli(["jobs", "show", str(job_id)], database_url)
    assert shown.returncode == 0, shown.stderr
    assert "Cookie: sid=***; theme=***" in shown.stdout
    assert "Set-Cookie: sid=***; Path=/; HttpOnly" in shown.stdout
    for answer in (
        shown,
        run_cli(["failures"], database_url),
        run_cli(["failures", "--json"], database_url),
        run_cli(["jobs", "list", "--status", "failed"], database_url),
        run_cli(["jobs", "list", "--status", "failed", "--json"], database_url),
    ):
        assert answer.returncode == 0, answer.stderr
        assert SECRET not in answer.stdout, answer.args

    client = create_app(load_settings(None, database_url=database_url), engine).test_client()
    for path in (f"/jobs/{job_id}", "/", "/failures", "/hosts/h1", "/jobs?status=failed"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert SECRET not in page.get_data(as_text=True), path

    # The Python API's error for a failed job says the error's last line, masked.
    assert SECRET not in str(JobFailed(job_id, "failed", LEAKY))


def test_a_webhook_body_carries_the_error_masked() -> None:
    from scrapefleet.producer.webhooks.webhook_sender import encode_body

    body = encode_body({"job_id": 1, "status": "failed", "error": LEAKY}).decode()
    assert SECRET not in body and "sid=***" in body
