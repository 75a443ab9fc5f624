"""Every statement that changes state lives in scrapefleet.common.store: an INSERT, UPDATE or
DELETE (or TRUNCATE) in the SQL text of any other module of the library or the daemons fails
this test. Migrations are the schema's own history and are left out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRITES = re.compile(
    r"\b(INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|TRUNCATE\s+\w+)\b", re.IGNORECASE
)


def writes_in(source: str) -> list[str]:
    """The state-changing SQL found in the string literals of one module's source (docstrings,
    which talk about statements, aside)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        literal = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if literal and id(node) not in docstrings:
            found += [m[0] for m in WRITES.finditer(node.value)]
    return found


def test_no_write_outside_the_store() -> None:
    offenders = []
    for folder in ("common", "producer", "consumer"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.is_relative_to(REPO / "common" / "store"):
                continue
            if found := writes_in(path.read_text()):
                offenders.append(f"{path.relative_to(REPO)}: {found}")
    assert not offenders, "state-changing SQL outside common/store:\n" + "\n".join(offenders)


def test_the_scanner_finds_a_write() -> None:
    planted = 'X = "SELECT 1"\nY = ("UPDATE jobs SET status = \'failed\'" " WHERE id = 1")\n'
    assert writes_in(planted) == ["UPDATE jobs SET"]
    assert writes_in('Z = "delete   from hosts"') == ["delete   from"]
    assert writes_in('"""Docs may say INSERT into jobs."""') == []
