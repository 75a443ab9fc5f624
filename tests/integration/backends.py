"""For tests of lost connections: a settable clock and a backend ended by the server."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def terminate(admin: Engine, pid: int) -> None:
    """End backend ``pid`` as a database restart or an operator would (pg_terminate_backend)."""
    with admin.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid}).scalar()
