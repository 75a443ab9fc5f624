"""Results out: `jobs list`, `results export` (the real CLI against PostgreSQL), and the Python
API's `Client.results` and `Client.map` (with a real consumer running the jobs)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.api import Client, JobFailed, ResultFilter
from scrapefleet.common.store import NewJob
from tests.cli_helpers import run_cli
from tests.integration.test_consumer import HOST, consumer_thread, make_settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ERROR = "Traceback ...\nRuntimeError: the page said no"


def _finished(
    engine: Engine, status: str, kind: str, results: list[dict[str, object]]
) -> list[int]:
    """Jobs put in a finished ``status`` by hand, with results (the store's moves are tested
    elsewhere)."""
    with engine.begin() as conn:
        jobs = [NewJob(kind, {"n": n}) for n in range(len(results))]
        ids = store.insert_jobs(conn, jobs, default_max_attempts=3).ids
        for job_id, result in zip(ids, results, strict=True):
            conn.execute(
                sa.text(
                    "UPDATE jobs SET status = :s, host = 'h1', attempts = 1, finished_at = now(),"
                    " result = CAST(:r AS jsonb), last_error = :e WHERE id = :id"
                ),
                {
                    "s": status,
                    "r": json.dumps(result) if status == "completed" else None,
                    "e": ERROR if status == "failed" else None,
                    "id": job_id,
                },
            )
    return ids


def _archive(engine: Engine, ids: list[int]) -> None:
    """Retention's move of ``ids`` (finished an hour ago) to jobs_archive."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET finished_at = now() - interval '1 hour' WHERE id = ANY(:ids)"),
            {"ids": ids},
        )
        cutoff = conn.execute(sa.text("SELECT now() - interval '30 minutes'")).scalar_one()
        assert store.archive_finished_jobs(conn, cutoff, 100) == len(ids)


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0].removeprefix("error: ")


def test_export_streams_every_matching_job_archived_ones_too(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    done = _finished(engine, "completed", "prices", [{"price": n} for n in range(5)])
    failed = _finished(engine, "failed", "prices", [{}])
    _finished(engine, "completed", "other", [{"x": 1}])
    _archive(engine, done[:2])

    out = tmp_path / "prices.jsonl"
    exported = run_cli(["results", "export", "--kind", "prices", "-o", str(out)], database_url)
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.strip() == "exported 6 job(s) (kind 'prices')"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == sorted([*done, *failed])
    assert [r["result"] for r in rows if r["status"] == "completed"] == [
        {"price": n} for n in range(5)
    ]
    assert rows[0]["payload"] == {"n": 0} and rows[0]["finished_at"]

    as_csv = run_cli(
        ["results", "export", "--kind", "prices", "--status", "completed", "--format", "csv"],
        database_url,
    )
    assert as_csv.returncode == 0, as_csv.stderr
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(table) == 5 and json.loads(table[4]["result"]) == {"price": 4}


def test_export_takes_its_format_from_the_file_name_and_csv_flattens_results(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    results: list[dict[str, object]] = [
        {"title": '=HYPERLINK("http://evil.test")', "fields": {"price": "9", "sku": "@A"}},
        {"title": "Plain", "status": 200, "fields": {"price": "-3"}},
    ]
    ids = _finished(engine, "completed", "crawl", results)

    def export(name: str, *extra: str) -> Path:
        out = tmp_path / name
        done = run_cli(
            ["results", "export", "--kind", "crawl", "-o", str(out), *extra], database_url
        )
        assert done.returncode == 0, done.stderr
        return out

    as_array = json.loads(export("week.json").read_text())
    assert [row["id"] for row in as_array] == ids
    lines = export("week.jsonl").read_text().splitlines()
    assert [json.loads(line)["result"] for line in lines] == results
    forced = export("week.out", "--format", "json").read_text()
    assert json.loads(forced)[1]["result"] == results[1]

    table = list(csv.DictReader(export("week.csv", "--flatten").open(newline="")))
    assert [row["id"] for row in table] == [str(i) for i in ids]
    assert "result" not in table[0]
    assert table[0]["result.title"] == '\'=HYPERLINK("http://evil.test")'  # not a formula
    assert (table[0]["result.fields.price"], table[0]["result.fields.sku"]) == ("9", "'@A")
    assert (table[1]["result.status"], table[1]["result.fields.price"]) == ("200", "'-3")
    assert table[1]["result.fields.sku"] == ""
    plain = list(csv.DictReader(export("all.csv").open(newline="")))
    assert json.loads(plain[1]["result"]) == results[1]


def test_list_shows_a_table_or_json_lines_and_says_when_nothing_matches(
    engine: Engine, database_url: str
) -> None:
    [failed] = _finished(engine, "failed", "prices", [{}])
    _finished(engine, "completed", "prices", [{"ok": True}] * 3)
    table = run_cli(["jobs", "list", "--status", "failed"], database_url)
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.strip().splitlines()
    assert header.split()[:5] == ["id", "status", "kind", "host", "att"]
    assert line.split()[:3] == [str(failed), "failed", "prices"]
    assert line.endswith("RuntimeError: the page said no")

    as_json = run_cli(["jobs", "list", "--kind", "prices", "--limit", "2", "--json"], database_url)
    assert [json.loads(x)["kind"] for x in as_json.stdout.splitlines()] == ["prices", "prices"]

    nothing = run_cli(["jobs", "list", "--kind", "nosuch", "--since", "2h"], database_url)
    assert nothing.returncode == 1
    assert _one_error_line(nothing).startswith("no job matches (kind 'nosuch', since ")


def test_list_and_export_filter_by_profile_crawl_and_error_class(
    engine: Engine, database_url: str
) -> None:
    blocked, permanent = _finished(engine, "failed", "prices", [{}, {}])
    crawled = _finished(engine, "completed", "prices", [{"page": 1}, {"page": 2}])
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET error_class = CASE id WHEN :b THEN 'blocked' ELSE 'permanent' END,"
                " profile = CASE id WHEN :b THEN 'acct-7' END WHERE id IN (:b, :p)"
            ),
            {"b": blocked, "p": permanent},
        )
        conn.execute(
            sa.text("UPDATE jobs SET crawl_id = :root WHERE id = ANY(:ids)"),
            {"root": crawled[0], "ids": crawled},
        )

    def listed(*args: str) -> list[int]:
        answer = run_cli(["jobs", "list", "--json", *args], database_url)
        assert answer.returncode == 0, answer.stderr
        return sorted(json.loads(line)["id"] for line in answer.stdout.splitlines())

    assert listed("--error-class", "blocked") == [blocked]
    assert listed("--profile", "acct-7") == [blocked]
    assert listed("--crawl", str(crawled[0])) == crawled
    exported = run_cli(["results", "export", "--error-class", "permanent"], database_url)
    assert [json.loads(line)["id"] for line in exported.stdout.splitlines()] == [permanent]
    assert exported.stderr.strip() == "exported 1 job(s) (error class permanent)"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--since", "yesterday"], "--since 'yesterday'"),
        (["--status", "done"], "status 'done' is not one of"),
        (["--error-class", "flaky"], "error class 'flaky' is not one of"),
    ],
)
def test_bad_filters_are_one_line_naming_the_option(
    database_url: str, args: list[str], named: str
) -> None:
    bad = run_cli(["results", "export", *args], database_url)
    assert bad.returncode == 2 and named in _one_error_line(bad)


@pytest.fixture
def assigner(engine: Engine) -> Iterator[None]:
    """The producer's part, for the consumer under test: pending jobs go to its host."""
    stop = threading.Event()

    def assign() -> None:
        while not stop.wait(0.05):
            with engine.begin() as conn:
                due = store.lock_pending_jobs(conn, 100)
                store.assign_jobs(conn, [(p.id, HOST) for p in due])

    thread = threading.Thread(target=assign, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(5)


def test_map_yields_results_in_submit_order_and_raises_at_a_failed_one(
    engine: Engine, database_url: str, tmp_path: Path, assigner: None
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=4)
    with consumer_thread(settings, database_url), Client(database_url, settings) as client:
        # The first finishes last: map still yields in submit order.
        payloads = [{"sleep_s": 0.6}, {}, {}, {"fail": True}, {}]
        results = client.map("noop", payloads, timeout_s=60)
        assert [next(results) for _ in range(3)] == [{"ok": True}] * 3
        with pytest.raises(JobFailed, match="noop asked to fail"):
            next(results)
        listed = list(client.results(ResultFilter(kind="noop", statuses=("completed",))))
    assert len(listed) >= 3 and all(r["result"] == {"ok": True} for r in listed)
