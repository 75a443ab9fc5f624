"""A NUL character in a submitted job (PostgreSQL stores none in text or jsonb) is refused at
submit: one line naming the line and the field, exit 2, nothing inserted. It used to reach the
insert and print a psycopg traceback of some 45 lines without the line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GOOD = {"kind": "noop", "payload": {}}
URL = "http://127.0.0.1/"
CASES = [
    ({"kind": "http_get", "payload": {"url": URL + "a\x00b"}}, "field 'payload.url'"),
    ({"kind": "http_get", "payload": {"url": URL, "user_agent": "x\x00"}}, "'payload.user_agent'"),
    ({"kind": "http_get", "payload": {"url": URL, "headers": {"X-A\x00": "1"}}}, "X-A\\\\u0000"),
    ({"kind": "noop", "dedupe_key": "k\x00"}, "field 'dedupe_key'"),
    ({"kind": "noop", "lock_key": "\x00"}, "field 'lock_key'"),
    ({"kind": "noop", "callback_url": URL + "\x00"}, "field 'callback_url'"),
]


@pytest.mark.parametrize(("job", "field"), CASES, ids=[c[1] for c in CASES])
def test_a_nul_is_refused_naming_the_line_and_field(
    engine: Engine, database_url: str, tmp_path: Path, job: dict[str, object], field: str
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(job) + "\n")
    answer = run_cli(["submit", str(path)], database_url)
    assert answer.returncode == 2, answer.stderr
    lines = answer.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: line 2: "), answer.stderr
    assert field in lines[0] and "NUL" in lines[0], lines[0]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 0


def test_a_nul_in_a_csv_cell_is_refused_naming_the_line(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(f"kind,payload.url\nhttp_get,{URL}\nhttp_get,{URL}a\x00b\n")
    answer = run_cli(["submit", str(path)], database_url)
    assert answer.returncode == 2, answer.stderr
    lines = answer.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: line 3: "), answer.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 0
