"""Profiles: persistent browser identities and the hosts that hold them.

- ``jobs.profile_pool``: the profiles a job may run under (its browser option ``profile``, one
  name or a pool), set at submit; ``jobs.profile``: the one the producer chose, set when it
  assigns the job. A unique partial index on ``profile`` for queued and processing jobs makes
  two jobs of one profile at once impossible, as ``jobs_lock_key_in_flight_key`` does for lock
  keys (the planner avoids it; the index is the guarantee).
- ``profiles``: one row per profile, the operator's view: the host it is bound to (the first
  that ran it: its user-data-dir lives there), its state and cool-down, when it was last used,
  how many jobs it got and how many were blocked. The producer writes it when it assigns; a
  consumer may only cool down its own host's profiles (a blocked job), and sees no other
  host's row (row-level security, as on ``jobs`` in 0008).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
IN_FLIGHT = "status IN ('queued', 'processing')"
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # common.browser.profile_names.PROFILE_NAME_SQL
COMMENT = "Persistent browser profiles: bound host, state, cool-down, use (the operator's view)"
SEES_ALL = "(SELECT db_role_sees_all(current_user))"
OWN_HOST = "(SELECT db_role_host(current_user))"
# (policy, command, USING, WITH CHECK): a consumer reads and updates its own host's rows only,
# and never moves one to another host; inserts and deletes are the producer's and operator's.
POLICIES = (
    ("profiles_read", "SELECT", f"host = {OWN_HOST}", None),
    ("profiles_write", "UPDATE", f"host = {OWN_HOST}", f"host = {OWN_HOST}"),
    ("profiles_insert", "INSERT", None, "false"),
    ("profiles_delete", "DELETE", "false", None),
)


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("profile_pool", sa.ARRAY(sa.Text)))
        op.add_column(table, sa.Column("profile", sa.Text))
    op.create_index(
        "jobs_profile_in_flight_key",
        "jobs",
        ["profile"],
        unique=True,
        postgresql_where=sa.text(f"profile IS NOT NULL AND {IN_FLIGHT}"),
    )
    op.create_table(
        "profiles",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("host", sa.Text),
        sa.Column("state", sa.Text, nullable=False, server_default="ready"),
        sa.Column("cooldown_until", TS),
        sa.Column("last_used_at", TS),
        sa.Column("jobs", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("blocks", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("state IN ('ready', 'cooling')", name="profiles_state_valid"),
        sa.CheckConstraint(f"name ~ '{NAME_PATTERN}'", name="profiles_name_valid"),
        comment=COMMENT,
    )
    op.create_index("profiles_host_idx", "profiles", ["host"])
    op.execute("ALTER TABLE profiles ENABLE ROW LEVEL SECURITY")
    for policy, command, using, check in POLICIES:
        clauses = [f"CREATE POLICY {policy} ON profiles FOR {command}"]
        if using is not None:
            clauses.append(f"USING ({SEES_ALL} OR {using})")
        if check is not None:
            clauses.append(f"WITH CHECK ({SEES_ALL} OR {check})")
        op.execute(" ".join(clauses))


def downgrade() -> None:
    op.drop_table("profiles")  # its policies go with it
    op.drop_index("jobs_profile_in_flight_key", table_name="jobs")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "profile")
        op.drop_column(table, "profile_pool")
