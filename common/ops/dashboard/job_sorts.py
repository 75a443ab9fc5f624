"""The orders the dashboard's job search can list in, each paged by a keyset cursor.

A cursor is the last row's sort key and id (``after=KEY,ID``, or ``after=ID`` for the orders by
id alone): the next page is the rows after it in that order, as cheap on the hundredth page as on
the first, and stable while jobs are added (an OFFSET would shift under new rows). Pure: the SQL
fragments are constants, the cursor's values are bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

KeyKind = Literal["time", "int"]


@dataclass(frozen=True)
class JobSort:
    name: str
    label: str  # "newest first": what the page says it shows
    order_by: str
    after: str  # the rows after the cursor (:after_key, :after_id) in this order
    key_column: str | None = None  # the sort key besides id; None = id alone
    key_kind: KeyKind | None = None
    only: str | None = None  # the rows this order covers (a job with no key is not listed)


SORTS: dict[str, JobSort] = {
    sort.name: sort
    for sort in (
        JobSort("newest", "newest first", "id DESC", "id < :after_id"),
        JobSort("oldest", "oldest first", "id ASC", "id > :after_id"),
        JobSort(
            "finished",
            "most recently finished first (finished jobs only)",
            "finished_at DESC, id DESC",
            "(finished_at, id) < (:after_key, :after_id)",
            key_column="finished_at",
            key_kind="time",
            only="finished_at IS NOT NULL",
        ),
        JobSort(
            "priority",
            "highest priority first, then oldest (the order pending jobs are assigned in)",
            "priority DESC, id ASC",
            "(priority < :after_key OR (priority = :after_key AND id > :after_id))",
            key_column="priority",
            key_kind="int",
        ),
    )
}
DEFAULT_SORT = "newest"


class BadCursor(ValueError):
    """An ``after`` value that is not this order's cursor."""


def parse_cursor(sort: JobSort, text: str) -> dict[str, Any]:
    """``after=...`` as the bound parameters of ``sort.after``."""
    if sort.key_kind is None:
        if not text.isascii() or not text.isdigit():
            raise BadCursor(f"after must be a job id for the {sort.name} order, not {text!r}")
        return {"after_id": int(text)}
    key_text, _, id_text = text.rpartition(",")
    if not key_text or not id_text.isascii() or not id_text.isdigit():
        raise BadCursor(f"after must be KEY,ID for the {sort.name} order, not {text!r}")
    key: Any
    try:
        key = datetime.fromisoformat(key_text) if sort.key_kind == "time" else int(key_text)
    except ValueError:
        raise BadCursor(f"after has a bad {sort.key_column} for the {sort.name} order") from None
    if isinstance(key, datetime) and key.tzinfo is None:
        raise BadCursor("after's time needs its UTC offset")
    return {"after_key": key, "after_id": int(id_text)}


def cursor_of(sort: JobSort, row: dict[str, Any]) -> str:
    """The ``after`` value that continues past ``row`` in this order."""
    if sort.key_column is None:
        return str(row["id"])
    key = row[sort.key_column]
    text = key.isoformat() if isinstance(key, datetime) else str(key)
    return f"{text},{row['id']}"
