"""Which database role has which duty (``db_roles``, migration 0008): the row policies read it,
`scrapefleet db grant` writes it through these two statements."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from scrapefleet.common.store.sql_text import statement

__all__ = ["FORGET_DB_ROLE_SQL", "REGISTER_DB_ROLE_SQL", "forget_db_role", "register_db_role"]

REGISTER_DB_ROLE_SQL = statement(
    """
INSERT INTO db_roles (role_name, duty, host) VALUES (:role, :duty, :host)
ON CONFLICT (role_name) DO UPDATE SET duty = EXCLUDED.duty, host = EXCLUDED.host
"""
)
FORGET_DB_ROLE_SQL = statement("DELETE FROM db_roles WHERE role_name = :role")


def register_db_role(conn: Connection, role: str, duty: str, host: str | None = None) -> None:
    """``role`` is the producer, reporting, or ``host``'s consumer role from now on."""
    conn.execute(REGISTER_DB_ROLE_SQL, {"role": role, "duty": duty, "host": host})


def forget_db_role(conn: Connection, role: str) -> None:
    conn.execute(FORGET_DB_ROLE_SQL, {"role": role})
