"""The admin CLI as a real subprocess against real PostgreSQL."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.cli_helpers import run_cli

pytestmark = pytest.mark.e2e


def _job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one()


def _lines(*jobs: dict[str, object]) -> str:
    return "".join(json.dumps(j) + "\n" for j in jobs)


def test_submit_jsonl_and_status(engine: Engine, database_url: str) -> None:
    text = _lines(
        {"kind": "noop"},
        {"kind": "http_get", "payload": {"url": "http://127.0.0.1:9/"}, "priority": 5},
        {"kind": "noop", "dedupe_key": "k1", "lock_key": "acct"},
    )
    done = run_cli(["submit", "-"], database_url, stdin=text)
    assert done.returncode == 0, done.stderr
    assert "submitted 3 jobs" in done.stdout
    status = run_cli(["status", "--json"], database_url)
    assert json.loads(status.stdout)["jobs"]["pending"] == 3


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"kind": "noop", "priority": "high"}', "line 3: field 'priority'"),
        ('{"kind": "nosuch"}', "line 3: unknown job kind 'nosuch'"),
        ('{"kind": "http_get", "payload": {"url": "ftp://x"}}', "line 3: payload.url"),
        ('{"kind": "noop", "colour": "red"}', "line 3: field 'colour': unknown field"),
        ('{"kind": "noop"', "line 3: not JSON"),
        ('{"kind": "noop", "not_before": "2026-01-01T00:00:00"}', "line 3: field 'not_before'"),
    ],
)
def test_malformed_line_inserts_nothing(
    engine: Engine, database_url: str, bad_line: str, message: str
) -> None:
    text = _lines({"kind": "noop"}, {"kind": "noop"}) + bad_line + "\n" + _lines({"kind": "noop"})
    done = run_cli(["submit", "-"], database_url, stdin=text)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _job_count(engine) == 0


def test_submit_csv_with_flat_payload_columns(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "kind,priority,payload.url,payload.timeout_s,lock_key\n"
        "http_get,1,http://127.0.0.1:9/a,5,acct-1\n"
        "http_get,,http://127.0.0.1:9/b,,\n"
    )
    done = run_cli(["submit", str(path)], database_url)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT priority, payload, lock_key FROM jobs ORDER BY id")
        ).all()
    assert rows[0] == (1, {"url": "http://127.0.0.1:9/a", "timeout_s": 5}, "acct-1")
    assert rows[1] == (0, {"url": "http://127.0.0.1:9/b"}, None)

    bad = tmp_path / "bad.csv"
    bad.write_text("kind,payload.url\nhttp_get,http://127.0.0.1:9/\nhttp_get,nope\n")
    done = run_cli(["submit", str(bad)], database_url)
    assert done.returncode == 2 and "line 3: payload.url" in done.stderr
    assert _job_count(engine) == 2


def test_bad_setting_and_unreachable_database(database_url: str) -> None:
    bad = run_cli(["status"], database_url, SCRAPEFLEET_CAPACITY="lots")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: invalid setting capacity (SCRAPEFLEET_CAPACITY): "
        "Input should be a valid integer, unable to parse string as an integer"
    ]
    unreachable = run_cli(["status"], "postgresql://postgres@127.0.0.1:1/none")
    assert unreachable.returncode == 1
    lines = unreachable.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: database unavailable"), lines
    missing = run_cli(["status"], None)
    assert missing.returncode == 2 and "database_url is not set" in missing.stderr


def test_hosts_and_jobs_commands(engine: Engine, database_url: str) -> None:
    assert run_cli(["hosts", "add", "h1", "--capacity", "4"], database_url).returncode == 0
    run_cli(["submit", "-"], database_url, stdin=_lines({"kind": "noop"}, {"kind": "noop"}))
    cancel = run_cli(["jobs", "cancel", "--kind", "noop"], database_url)
    assert "cancelled 2 job(s)" in cancel.stdout
    retry = run_cli(["jobs", "retry", "1", "--include-cancelled"], database_url)
    assert "retried 1 job(s)" in retry.stdout
    show = run_cli(["jobs", "show", "1"], database_url)
    assert show.returncode == 0
    assert "pending ->" in show.stdout and "cancelled by operator" in show.stdout
    assert run_cli(["jobs", "show", "99"], database_url).returncode == 1
    drain = run_cli(["hosts", "drain", "h1"], database_url)
    assert drain.returncode == 0 and "draining" in drain.stdout
    listing = run_cli(["hosts", "list"], database_url)
    assert "h1" in listing.stdout and "draining" in listing.stdout
    assert run_cli(["hosts", "enable", "h1"], database_url).returncode == 0
    again = run_cli(["hosts", "enable", "h1"], database_url)
    assert again.returncode == 1 and "host h1 is already active: nothing changed" in again.stderr
    assert run_cli(["hosts", "remove", "h1"], database_url).returncode == 0
    gone = run_cli(["hosts", "drain", "h1"], database_url)
    assert gone.returncode == 1 and "no host named 'h1'" in gone.stderr


def test_fleet_pause_and_resume_say_when_they_change_nothing(
    engine: Engine, database_url: str
) -> None:
    nothing = run_cli(["fleet", "resume"], database_url)
    assert nothing.returncode == 1
    assert "assignment is not paused: nothing to resume" in nothing.stderr
    assert run_cli(["fleet", "pause", "--reason", "db upgrade"], database_url).returncode == 0
    twice = run_cli(["fleet", "pause", "--reason", "other"], database_url)
    assert twice.returncode == 1 and "already paused" in twice.stderr
    with engine.connect() as conn:
        reason = conn.execute(sa.text("SELECT reason FROM fleet_control")).scalar_one()
    assert reason == "db upgrade"  # the first pause's record stands
    assert run_cli(["fleet", "resume"], database_url).returncode == 0
    assert run_cli(["fleet", "resume"], database_url).returncode == 1


def test_submit_50000_lines(engine: Engine, database_url: str, tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(
        "".join(
            json.dumps({"kind": "http_get", "payload": {"url": f"http://127.0.0.1:9/{n}"}}) + "\n"
            for n in range(50_000)
        )
    )
    started = time.monotonic()
    done = run_cli(["submit", str(path)], database_url)
    elapsed = time.monotonic() - started
    print(f"\n[figure] submit 50,000 jobs from a file: {elapsed:.2f} s (CLI process included)")
    assert done.returncode == 0, done.stderr
    assert _job_count(engine) == 50_000
