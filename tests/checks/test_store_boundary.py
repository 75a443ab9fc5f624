"""Every statement that changes state lives in scrapefleet.common.store: an INSERT, UPDATE,
DELETE, MERGE, TRUNCATE or COPY ... FROM in the SQL text of any other module of the library or
the daemons fails this test, and so does a SQLAlchemy Core insert/update/delete. Migrations are
the schema's own history and are left out.

SQL text is every string expression of a module: literals, f-strings (an interpolated part
reads as a name) and ``+`` concatenations, so ``f"UPDATE {table} SET ..."`` is caught too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
WRITES = re.compile(
    r"\b(INSERT\s+INTO"
    r"|UPDATE\s+(?:ONLY\s+)?\w+(?:\s+(?:AS\s+)?\w+)?\s+SET"
    r"|DELETE\s+FROM"
    r"|MERGE\s+INTO"
    r"|TRUNCATE\s+\w+"
    r"|COPY\s+\w+(?:\s*\([^)]*\))?\s+FROM)\b",
    re.IGNORECASE,
)
CORE_WRITES = {"insert", "update", "delete"}  # sa.insert(...), tables.jobs.update(), ...
PLACEHOLDER = " name "  # what an interpolated part of an f-string reads as


def _text(node: ast.AST) -> str | None:
    """The text of a string expression, or None when ``node`` is not one."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) or PLACEHOLDER for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left or PLACEHOLDER) + (right or PLACEHOLDER)
    return None


def _docstrings(tree: ast.Module) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _core_write(node: ast.AST) -> str | None:
    """``sa.insert(...)``, ``sqlalchemy.update(...)``, ``tables.jobs.delete()``: the Core
    constructs of a write (``dict.update`` and ``list.insert`` are not theirs)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in CORE_WRITES:
        return None
    owner = ast.unparse(node.func.value)
    if owner in ("sa", "sqlalchemy") or owner.startswith("tables."):
        return f"{owner}.{node.func.attr}()"
    return None


def writes_in(source: str) -> list[str]:
    """The state-changing statements found in one module's source (docstrings, which talk
    about statements, aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if id(node) in skip:
            return
        text = _text(node)
        if text is not None:  # the whole expression at once: its parts are not read again
            found.extend(m[0] for m in WRITES.finditer(text))
            return
        if (core := _core_write(node)) is not None:
            found.append(core)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
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


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('X = "SELECT 1"\nY = ("UPDATE jobs SET status = \'failed\'" " WHERE id = 1")\n', 1),
        ('Z = "delete   from hosts"', 1),
        ('sa.text(f"UPDATE {table} SET x = 1")', 1),
        ('q = "UPDATE hosts h" + " SET state = :s"', 1),
        ('q = "INSERT " + "INTO jobs (kind) VALUES (1)"', 1),
        ("cur.copy('COPY incoming (a, b) FROM STDIN')", 1),
        ('q = "MERGE INTO jobs USING x ON true"', 1),
        ('q = "truncate job_events"', 1),
        ("conn.execute(sa.update(tables.jobs).values(status='x'))", 1),
        ("conn.execute(tables.hosts.delete())", 1),
        # Not writes: reads, a docstring, dict and list methods, a COPY out.
        ('"""Docs may say INSERT into jobs."""', 0),
        ('q = "SELECT id FROM jobs FOR UPDATE SKIP LOCKED"', 0),
        ('q = "COPY (SELECT 1) TO STDOUT"', 0),
        ("d.update(a=1)\nitems.insert(0, x)\nrows.delete()", 0),
        ('q = "the next update setting"', 0),
    ],
)
def test_the_scanner_finds_a_planted_write(source: str, found: int) -> None:
    assert len(writes_in(source)) == found, writes_in(source)
