"""Pure parts of the operator tools: log lines, webhook signatures, dashboard input and chart
buckets."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime

import pytest

from scrapefleet.common.jobs.webhook_signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, verify
from scrapefleet.common.ops.dashboard.charts import WINDOWS, bar_chart, bucket_starts, fill_bars
from scrapefleet.common.ops.dashboard.inputs import BadInput, parse_job_id, parse_search
from scrapefleet.common.runtime.logging_setup import configure_logging, fields


def _log_line(log_format: str) -> str:
    stream = io.StringIO()
    configure_logging("INFO", log_format, stream)
    try:
        logging.getLogger("scrapefleet.test").info(
            "job finished", extra=fields(job=42, host="h 1", attempt=2)
        )
    finally:
        configure_logging("WARNING", "text")
    return stream.getvalue()


def test_text_log_is_one_line_with_fields() -> None:
    line = _log_line("text")
    assert line.count("\n") == 1
    assert 'job finished job=42 host="h 1" attempt=2' in line


def test_json_log_has_fields_as_keys() -> None:
    document = json.loads(_log_line("json"))
    assert document["msg"] == "job finished"
    assert (document["job"], document["host"], document["attempt"]) == (42, "h 1", 2)
    with pytest.raises(ValueError):
        fields(colour="red")


def test_signature_round_trip_and_tampering() -> None:
    body = b'{"job_id":1,"status":"completed"}'
    headers = sign("s" * 20, body, now=1_000_000)
    assert headers[SIGNATURE_HEADER].startswith("sha256=")
    check = {"timestamp": headers[TIMESTAMP_HEADER], "signature_header": headers[SIGNATURE_HEADER]}
    assert verify("s" * 20, body, **check, now=1_000_010)
    assert not verify("s" * 20, body + b" ", **check, now=1_000_010)
    assert not verify("t" * 20, body, **check, now=1_000_010)
    assert not verify("s" * 20, body, **check, now=1_000_000 + 3600)  # replayed later


def test_dashboard_inputs() -> None:
    assert parse_job_id(" 42 ") == 42
    for bad in ("abc", "-1", "0", "1e3", "٣", "9" * 30, ""):
        with pytest.raises(BadInput):
            parse_job_id(bad)
    assert parse_search({"status": "failed", "kind": " fetch_page "}).kind == "fetch_page"
    with pytest.raises(BadInput):
        parse_search({"status": "exploded"})
    with pytest.raises(BadInput):
        parse_search({"host": "x" * 500})


def test_chart_buckets_end_at_now() -> None:
    now = datetime(2026, 11, 22, 7, 31, tzinfo=UTC)
    hour = WINDOWS[0]
    starts = bucket_starts(hour, now)
    assert len(starts) == 12 and starts[-1] == int(
        datetime(2026, 11, 22, 7, 30, tzinfo=UTC).timestamp()
    )
    bars = fill_bars(hour, now, {(starts[-1], "completed"): 5, (starts[-1], "failed"): 2})
    assert (bars[-1].completed, bars[-1].failed) == (5, 2)
    svg = str(bar_chart(hour, bars))
    assert svg.startswith("<svg") and "5 completed, 2 failed" in svg
