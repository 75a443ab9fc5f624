"""The CLI's answers when a command cannot do what it was asked, as real subprocesses against
real PostgreSQL: one line saying why and a non-zero exit, never "0 job(s)" and exit 0; bulk
commands that ask before moving many jobs; settings, job files and host names that would
otherwise have failed late or silently."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec, NewJob
from tests.cli_helpers import BIN, run_cli
from tests.waiting import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _jobs(engine: Engine, count: int, status: str = "pending", kind: str = "noop") -> list[int]:
    """``count`` jobs put in ``status`` by hand (the store's moves are tested elsewhere)."""
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob(kind)] * count, default_max_attempts=3).ids
        if status != "pending":
            host = "h1" if status in ("queued", "processing") else None
            conn.execute(
                sa.text("UPDATE jobs SET status = :s, host = :h WHERE id = ANY(:ids)"),
                {"s": status, "h": host, "ids": ids},
            )
    return ids


def _count(engine: Engine, status: str) -> int:
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM jobs WHERE status = :s")
        return int(conn.execute(query, {"s": status}).scalar_one())


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0].removeprefix("error: ")


def _add_host(engine: Engine, name: str = "h1") -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name=name, capacity=6))


# ---------------------------------------------------------------- nothing matched


def test_cancel_of_a_running_job_says_it_runs_and_fails(engine: Engine, database_url: str) -> None:
    _add_host(engine)
    [running] = _jobs(engine, 1, "processing")
    done = run_cli(["jobs", "cancel", str(running)], database_url)
    assert done.returncode == 1
    assert _one_error_line(done) == (
        f"1 of 1 job(s) not cancelled: job {running} is processing"
        " (only pending or queued jobs are cancelled; `jobs stop` ends a running one)"
    )
    assert done.stdout == ""


def test_stop_cancels_a_running_job_and_names_the_rest(engine: Engine, database_url: str) -> None:
    _add_host(engine)
    [running] = _jobs(engine, 1, "processing")
    [pending] = _jobs(engine, 1)
    done = run_cli(["jobs", "stop", str(running), str(pending), "987654"], database_url)
    assert done.returncode == 1
    assert done.stdout.strip() == f"stopped 1 job(s): {running}"
    assert _one_error_line(done) == (
        f"not stopped: job {pending} is pending, not processing; job 987654 does not exist"
    )
    assert _count(engine, "cancelled") == 1 and _count(engine, "pending") == 1


def test_retry_of_a_completed_or_unknown_job_fails(engine: Engine, database_url: str) -> None:
    [completed] = _jobs(engine, 1, "completed")
    done = run_cli(["jobs", "retry", str(completed)], database_url)
    assert done.returncode == 1
    assert f"job {completed} is completed (only failed jobs are retried" in _one_error_line(done)
    unknown = run_cli(["jobs", "retry", "987654"], database_url)
    assert unknown.returncode == 1
    assert "job 987654 does not exist" in _one_error_line(unknown)


def test_cancel_on_a_host_that_does_not_exist_fails(engine: Engine, database_url: str) -> None:
    _jobs(engine, 3)
    done = run_cli(["jobs", "cancel", "--host", "nosuch"], database_url)
    assert done.returncode == 1
    assert _one_error_line(done) == "no host named 'nosuch', and no job names it"
    assert _count(engine, "pending") == 3


def test_partly_done_names_what_was_not_and_fails(engine: Engine, database_url: str) -> None:
    failed = _jobs(engine, 2, "failed")
    [completed] = _jobs(engine, 1, "completed")
    done = run_cli(["jobs", "retry", *map(str, [*failed, completed])], database_url)
    assert done.returncode == 1
    assert done.stdout.strip() == "retried 2 job(s)"
    assert f"1 of 3 job(s) not retried: job {completed} is completed" in _one_error_line(done)


# ---------------------------------------------------------------- retry: failed only


def test_retry_leaves_cancelled_jobs_unless_asked(engine: Engine, database_url: str) -> None:
    _jobs(engine, 2, "failed")
    _jobs(engine, 3, "cancelled")
    done = run_cli(["jobs", "retry", "--kind", "noop"], database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "retried 2 job(s)"
    assert _count(engine, "cancelled") == 3
    again = run_cli(["jobs", "retry", "--kind", "noop"], database_url)
    assert again.returncode == 1
    assert "--include-cancelled retries cancelled ones too" in _one_error_line(again)
    both = run_cli(["jobs", "retry", "--kind", "noop", "--include-cancelled"], database_url)
    assert both.returncode == 0 and both.stdout.strip() == "retried 3 job(s)"
    assert _count(engine, "cancelled") == 0


# ---------------------------------------------------------------- bulk confirmation


def test_a_bulk_cancel_off_a_terminal_needs_yes(engine: Engine, database_url: str) -> None:
    _jobs(engine, 150)
    refused = run_cli(["jobs", "cancel", "--kind", "noop"], database_url)
    assert refused.returncode == 2
    assert _one_error_line(refused) == (
        "this would cancel 150 jobs (kind 'noop'): pass --yes to confirm, or --dry-run to only"
        " count"
    )
    assert _count(engine, "pending") == 150
    dry = run_cli(["jobs", "cancel", "--kind", "noop", "--dry-run"], database_url)
    assert dry.returncode == 0 and dry.stdout.strip() == "would cancel 150 job(s) (kind 'noop')"
    assert _count(engine, "pending") == 150
    done = run_cli(["jobs", "cancel", "--kind", "noop", "--yes"], database_url)
    assert done.returncode == 0 and done.stdout.strip() == "cancelled 150 job(s)"
    assert _count(engine, "cancelled") == 150


def _on_a_terminal(args: list[str], database_url: str, answer: str) -> tuple[int, str, str]:
    """The CLI with its stdin on a pseudo-terminal, typing ``answer``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    env["SCRAPEFLEET_DATABASE_URL"] = database_url
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            [str(BIN / "scrapefleet"), *args],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        os.close(secondary)
        os.write(primary, answer.encode())
        out, err = proc.communicate(timeout=scaled(60))
    finally:
        os.close(primary)
    return proc.returncode, out, err


def test_a_bulk_retry_on_a_terminal_asks_with_the_count(engine: Engine, database_url: str) -> None:
    _jobs(engine, 120, "failed")
    code, out, err = _on_a_terminal(["jobs", "retry", "--kind", "noop"], database_url, "n\n")
    assert code == 1
    assert "retry 120 job(s) (kind 'noop')? [y/N]" in err
    assert "error: nothing retried: not confirmed" in err
    assert _count(engine, "failed") == 120
    code, out, err = _on_a_terminal(["jobs", "retry", "--kind", "noop"], database_url, "y\n")
    assert code == 0, err
    assert out.strip() == "retried 120 job(s)"
    assert _count(engine, "pending") == 120


# ---------------------------------------------------------------- job files


def test_a_file_that_is_not_utf8_or_empty_is_one_line(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    latin1 = tmp_path / "jobs.jsonl"
    latin1.write_bytes(b'{"kind": "noop", "dedupe_key": "caf\xe9"}\n')
    done = run_cli(["submit", str(latin1)], database_url)
    assert done.returncode == 2
    assert _one_error_line(done).startswith("line 1: not UTF-8 text (byte 0xe9")
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    done = run_cli(["submit", str(empty)], database_url)
    assert done.returncode == 2
    assert _one_error_line(done) == f"{empty} is empty: no jobs to submit"
    piped = run_cli(["submit", "-"], database_url, stdin="\n")
    assert piped.returncode == 2
    assert _one_error_line(piped) == "no jobs in stdin (only blank lines)"
    assert _count(engine, "pending") == 0


# ---------------------------------------------------------------- settings


def test_settings_in_the_documented_form_and_mistakes_by_name(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    # The documented form for user actions (not JSON), and a list of two by commas.
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scrapers.py").write_text("def prices(params):\n    return {}\n")
    (package / "more.py").write_text("def stock(params):\n    return {}\n")
    for actions in ("mypkg.scrapers:prices", "mypkg.scrapers:prices, mypkg.more:stock"):
        done = run_cli(
            ["submit", "-"],
            database_url,
            stdin='{"kind": "prices"}\n',
            SCRAPEFLEET_ACTIONS=actions,
            PYTHONPATH=str(tmp_path),
        )
        assert done.returncode == 0, done.stderr
    assert _count(engine, "pending") == 2
    typo = run_cli(["status"], database_url, SCRAPEFLEET_JOB_TIMEOUT="30")
    assert typo.returncode == 2
    assert _one_error_line(typo) == (
        "unknown setting SCRAPEFLEET_JOB_TIMEOUT in the environment;"
        " did you mean SCRAPEFLEET_JOB_TIMEOUT_S?"
    )
    infinite = run_cli(["status"], database_url, SCRAPEFLEET_JOB_TIMEOUT_S="1e999")
    assert infinite.returncode == 2
    assert _one_error_line(infinite) == (
        "invalid setting job_timeout_s (SCRAPEFLEET_JOB_TIMEOUT_S): Input should be a finite number"
    )


# ---------------------------------------------------------------- consumer host names


def _consumer(
    args: list[str], database_url: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    env |= {
        "SCRAPEFLEET_DATABASE_URL": database_url,
        "SCRAPEFLEET_STATE_DIR": str(tmp_path / "state"),
        "SCRAPEFLEET_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "SCRAPEFLEET_BOOT_ID_FILE": str(boot_id),
        "SCRAPEFLEET_BROWSER": "false",
        "SCRAPEFLEET_CONSUMER_POLL_S": "0.2",
    }
    return subprocess.run(
        [str(BIN / "scrapefleet-consumer"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )


def _hosts(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT name FROM hosts ORDER BY name")).scalars())


def test_a_consumer_refuses_a_host_never_added_unless_told_to_register(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    _add_host(engine, "hc-1")
    typo = _consumer(["run", "--host", "hc-typo", "--until-idle"], database_url, tmp_path)
    assert typo.returncode == 1
    assert typo.stderr.strip().splitlines()[-1] == (
        "scrapefleet-consumer: no host named 'hc-typo': add it with `scrapefleet hosts add"
        " hc-typo`, or pass --register to add it now"
    )
    assert _hosts(engine) == ["hc-1"]
    known = _consumer(["run", "--host", "hc-1", "--until-idle"], database_url, tmp_path)
    assert known.returncode == 0, known.stderr
    new = _consumer(["--host", "hc-2", "--register", "--until-idle"], database_url, tmp_path)
    assert new.returncode == 0, new.stderr
    assert _hosts(engine) == ["hc-1", "hc-2"]
