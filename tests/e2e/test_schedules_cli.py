"""`scrapefleet schedules`: add (everything checked before anything is written), list, show,
pause, resume, run, rm, as an operator types them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"kind": "noop", "payload": {"sleep_s": 0}}, indent=2))
    return path


def _schedule_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM schedule_defs")).scalar_one())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--cron", "0 25 * * *"], "error: --cron: '0 25 * * *': Error validating expression"),
        (["--cron", "0 7 * *"], "error: --cron: '0 7 * *' has 4 fields, not 5"),
        (["--cron", "0 7 * * *", "--tz", "Europe/Nowhere"], "error: --tz: unknown time zone"),
        (["--cron", "0 7 * * *", "--every", "1d"], "error: give --cron or --every (one of them)"),
        (["--every", "soon"], "error: --every 'soon': not a duration"),
    ],
)
def test_a_bad_cron_or_zone_is_one_line_and_nothing_is_written(
    engine: Engine, database_url: str, job_file: Path, options: list[str], message: str
) -> None:
    done = run_cli(["schedules", "add", "daily", *options, "--job", str(job_file)], database_url)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1
    assert _schedule_rows(engine) == 0


def test_an_unknown_kind_in_the_job_file_is_named(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"kind": "noop"}\n{"kind": "prices", "payload": {}}\n')
    done = run_cli(
        ["schedules", "add", "daily", "--cron", "0 7 * * *", "--job", str(jobs)], database_url
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {jobs}: line 2: unknown job kind 'prices' (known: ")
    assert _schedule_rows(engine) == 0


def test_a_schedules_life_from_the_command_line(
    engine: Engine, database_url: str, job_file: Path
) -> None:
    add = ["schedules", "add", "daily", "--cron", "0 7 * * *", "--tz", "Europe/Paris"]
    added = run_cli([*add, "--job", str(job_file), "--overlap", "skip"], database_url)
    assert added.returncode == 0, added.stderr
    assert "schedule 'daily': 1 job(s) at '0 7 * * *' (Europe/Paris); next run " in added.stdout
    assert "T07:00:00+01:00" in added.stdout
    again = run_cli(
        ["schedules", "add", "daily", "--cron", "0 8 * * *", "--job", str(job_file)], database_url
    )
    assert again.returncode == 2
    assert again.stderr == (
        "error: schedule 'daily' exists: remove it first, or pick another name\n"
    )

    listed = run_cli(["schedules", "list"], database_url)
    assert listed.returncode == 0 and "daily" in listed.stdout and "active" in listed.stdout

    assert run_cli(["schedules", "pause", "daily"], database_url).stdout == (
        "schedule 'daily' paused\n"
    )
    assert "paused" in run_cli(["schedules", "list"], database_url).stdout
    assert run_cli(["schedules", "resume", "daily"], database_url).stdout == (
        "schedule 'daily' resumed\n"
    )

    ran = run_cli(["schedules", "run", "daily"], database_url)
    assert ran.returncode == 0 and ran.stdout.startswith("schedule 'daily': submitted 1 job(s)")
    shown = json.loads(run_cli(["schedules", "show", "daily"], database_url).stdout)
    assert (shown["last_outcome"], shown["last_jobs"], shown["last_unfinished"]) == (
        "manual",
        1,
        1,
    )
    assert [run["outcome"] for run in shown["runs"]] == ["manual"]
    with engine.connect() as conn:
        kinds = conn.execute(sa.text("SELECT kind, payload FROM jobs")).all()
    assert [tuple(k) for k in kinds] == [("noop", {"sleep_s": 0})]

    assert run_cli(["schedules", "rm", "daily"], database_url).returncode == 0
    gone = run_cli(["schedules", "rm", "daily"], database_url)
    assert (gone.returncode, gone.stderr) == (1, "error: no schedule 'daily'\n")
    assert _schedule_rows(engine) == 0


def test_an_interval_schedule_is_added_with_every(
    engine: Engine, database_url: str, job_file: Path
) -> None:
    added = run_cli(
        ["schedules", "add", "often", "--every", "1h30m", "--job", str(job_file)], database_url
    )
    assert added.returncode == 0, added.stderr
    assert "schedule 'often': 1 job(s) every 1h30m; next run " in added.stdout
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT cron, every_s, next_run_at - created_at AS first FROM schedule_defs")
        ).one()
    assert (row.cron, row.every_s, row.first.total_seconds()) == (None, 5400.0, 5400.0)
