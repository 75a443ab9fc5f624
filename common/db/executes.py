"""What the store's single-statement functions need of a connection: ``execute`` and its rows.

Both a SQLAlchemy ``Connection`` and a ``StatementConnection`` (common.db.statement_connection,
a consumer's hot path) are one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy.sql.elements import TextClause

__all__ = ["Executes", "Rows"]


class Rows(Protocol):
    def __iter__(self) -> Iterator[Any]: ...

    def all(self) -> Sequence[Any]: ...

    def one(self) -> Any: ...


class Executes(Protocol):
    def execute(self, statement: TextClause, parameters: Mapping[str, Any], /) -> Rows: ...
