"""Reading a job file as bytes: not UTF-8, or no job in it, is one clear SubmitError."""

from __future__ import annotations

import io

import pytest

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.jobs.submit_file import read_jobs

pytestmark = pytest.mark.timeout(30)


def test_a_latin1_line_is_named_by_number_and_byte() -> None:
    raw = io.BytesIO(b'{"kind": "noop"}\n{"kind": "noop", "dedupe_key": "caf\xe9"}\n')
    with pytest.raises(SubmitError) as caught:
        read_jobs(raw, "jsonl")
    assert str(caught.value) == (
        "line 2: not UTF-8 text (byte 0xe9 at column 36): save the file as UTF-8"
    )


@pytest.mark.parametrize(
    ("content", "fmt", "message"),
    [
        (b"", "jsonl", "jobs.jsonl is empty: no jobs to submit"),
        (b"", "csv", "jobs.jsonl is empty: no jobs to submit"),
        (b"\n  \n", "jsonl", "no jobs in jobs.jsonl (only blank lines)"),
        (b"kind,priority\n", "csv", "no jobs in jobs.jsonl (only a header)"),
    ],
)
def test_nothing_to_submit_is_an_error(content: bytes, fmt: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        read_jobs(io.BytesIO(content), fmt, "jobs.jsonl")
    assert str(caught.value) == message


def test_utf8_with_a_byte_order_mark_and_crlf_reads() -> None:
    csv = "\ufeffkind,payload.url\r\nhttp_get,http://127.0.0.1:9/é\r\n".encode()
    [job] = read_jobs(io.BytesIO(csv), "csv")
    assert (job.kind, job.payload) == ("http_get", {"url": "http://127.0.0.1:9/é"})
    [line] = read_jobs(io.BytesIO('{"kind": "noop", "dedupe_key": "café"}\r\n'.encode()), "jsonl")
    assert line.dedupe_key == "café"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_json_nested_past_the_recursion_limit_is_named_by_line(fmt: str) -> None:
    deep = "[" * 5_000 + "]" * 5_000
    if fmt == "jsonl":
        content = '{"kind": "noop"}\n{"kind": "noop", "payload": {"a": ' + deep + "}}\n"
    else:
        content = 'kind,payload\nnoop,{}\nnoop,"{""a"": ' + deep + '}"\n'
    with pytest.raises(SubmitError) as caught:
        read_jobs(io.BytesIO(content.encode()), fmt)
    assert str(caught.value).startswith(f"line {2 if fmt == 'jsonl' else 3}: ")
    assert "not JSON: nested too deeply" in str(caught.value)


def test_a_csv_cell_over_the_field_limit_is_named_by_line() -> None:
    content = "kind,dedupe_key\nnoop,x\nnoop," + "a" * 200_000 + "\n"
    with pytest.raises(SubmitError) as caught:
        read_jobs(io.BytesIO(content.encode()), "csv")
    assert str(caught.value).startswith("line 3: not CSV: field larger than field limit")


def test_a_not_before_the_database_would_refuse_is_named_by_line() -> None:
    content = '{"kind": "noop", "not_before": "9999-12-31T00:00:00+00:00"}\n'
    with pytest.raises(SubmitError, match=r"^line 1: field 'not_before': .*2000 and 3000"):
        read_jobs(io.BytesIO(content.encode()), "jsonl")
