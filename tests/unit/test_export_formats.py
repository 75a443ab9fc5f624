"""Exports as pure functions: the format a file name picks, a JSON array streamed, a result
flattened into columns, and cells a spreadsheet would run as formulas escaped."""

from __future__ import annotations

import io
import json

import pytest

from scrapefleet.common.ops.results_out import (
    MAX_FLAT_COLUMNS,
    csv_cell,
    export_format,
    flat_columns,
    flat_result,
    write_json,
)

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("output", "fmt", "chosen"),
    [
        ("week.csv", None, "csv"),
        ("WEEK.CSV", None, "csv"),
        ("week.json", None, "json"),
        ("week.jsonl", None, "jsonl"),
        ("week.ndjson", None, "jsonl"),
        ("dir.csv/week", None, "jsonl"),
        (None, None, "jsonl"),
        ("week.csv", "json", "json"),
    ],
)
def test_the_format_follows_the_file_name_unless_given(
    output: str | None, fmt: str | None, chosen: str
) -> None:
    assert export_format(output, fmt) == chosen


def test_a_json_array_streams_and_an_empty_one_parses() -> None:
    for rows in ([], [{"id": 1}, {"id": 2}]):
        out = io.StringIO()
        assert write_json(rows, out, lambda: None) == len(rows)
        assert json.loads(out.getvalue()) == rows


def test_a_result_flattens_into_columns_first_met_first() -> None:
    result = {"title": "T", "fields": {"price": "9", "tags": ["a"]}, "n": None}
    assert flat_result(result) == {
        "result.title": "T",
        "result.fields.price": "9",
        "result.fields.tags": ["a"],
        "result.n": None,
    }
    rows = [{"result": {"b": 1}}, {"result": None}, {"result": {"a": 1, "b": 2}}]
    assert flat_columns(rows) == ["result.b", "result.a"]
    many = [{"result": {f"k{i}": i for i in range(MAX_FLAT_COLUMNS + 5)}}]
    assert len(flat_columns(many)) == MAX_FLAT_COLUMNS


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=x", "'\t=x"),
        ("plain = fine", "plain = fine"),
        (-1, -1),
        (None, ""),
        (["=x"], '["=x"]'),
    ],
)
def test_formula_cells_are_escaped(value: object, cell: object) -> None:
    assert csv_cell(value) == cell
