"""The log lines an operator reads in the journal: one per finished attempt with every field,
and none of the scheduler library's per-cycle chatter."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from scrapefleet.common.runtime.logging_setup import configure_logging
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.attempt_log import log_attempt

pytestmark = pytest.mark.timeout(10)

JOB = ClaimedJob(id=42, kind="fetch_page", payload={}, attempt=2, max_attempts=3, lock_key=None)


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("apscheduler").setLevel(logging.NOTSET)


def test_the_scheduler_librarys_per_run_lines_are_off(output: io.StringIO) -> None:
    configure_logging("INFO", stream=output)
    executor = logging.getLogger("apscheduler.executors.default")
    executor.info('Running job "cycle" (scheduled at 2026-11-23 07:00:00+00:00)')
    executor.info('Job "cycle" executed successfully')
    executor.warning("Run time of job was missed by 0:00:03")
    assert output.getvalue().count("\n") == 1 and "missed" in output.getvalue()


@pytest.mark.parametrize(
    ("status", "retried", "outcome", "level", "words"),
    [
        ("completed", False, "completed", "INFO", "completed in 1.23 s"),
        # The attempt's duration, never read as the wait before the next try.
        ("failed", True, "retry", "INFO", "failed in 1.23 s, to be retried"),
        ("failed", False, "failed", "WARNING", "failed for good in 1.23 s"),
        ("released", False, "released", "INFO", "released in 1.23 s"),
        ("blocked", False, "blocked", "WARNING", "blocked in 1.23 s"),
    ],
)
def test_one_json_line_per_attempt_with_every_field(
    output: io.StringIO, status: str, retried: bool, outcome: str, level: str, words: str
) -> None:
    configure_logging("INFO", "json", stream=output)
    log_attempt(JOB, "h1", status, retried, 1.23456)
    (line,) = output.getvalue().splitlines()
    document = json.loads(line)
    assert document["level"] == level
    assert {k: document[k] for k in ("job", "kind", "host", "attempt", "outcome")} == {
        "job": 42,
        "kind": "fetch_page",
        "host": "h1",
        "attempt": 2,
        "outcome": outcome,
    }
    assert document["duration_s"] == 1.235
    assert document["msg"] == f"job 42 fetch_page attempt 2 {words}"


def test_text_lines_carry_the_same_fields(output: io.StringIO) -> None:
    configure_logging("INFO", stream=output)
    log_attempt(JOB, "h1", "completed", False, 0.5)
    line = output.getvalue().strip()
    assert line.endswith(
        "job=42 kind=fetch_page host=h1 attempt=2 outcome=completed duration_s=0.5"
    ), line


def test_a_failed_attempt_is_one_line_with_its_fields_and_its_reason(
    output: io.StringIO,
) -> None:
    configure_logging("INFO", "json", stream=output)
    error = "Traceback (most recent call last):\n  ...\nTimeoutError: " + "x" * 1000 + "\n"
    log_attempt(JOB, "h1", "failed", True, 2.0, error)
    (line,) = output.getvalue().splitlines()
    document = json.loads(line)
    assert (document["level"], document["outcome"], document["job"]) == ("INFO", "retry", 42)
    assert document["reason"].startswith("TimeoutError: xxx") and document["reason"].endswith("...")
    assert len(document["reason"]) == 300


def test_httpx_request_lines_are_off_at_info(output: io.StringIO) -> None:
    configure_logging("INFO", stream=output)
    logging.getLogger("httpx").info('HTTP Request: GET http://127.0.0.1/ "HTTP/1.1 200 OK"')
    assert output.getvalue() == ""
