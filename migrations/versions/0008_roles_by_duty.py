"""Database roles by duty: consumers reach only their own host row and the jobs assigned to it.

Row-level security rather than SECURITY DEFINER functions: the store's statements stay exactly
as they are (a consumer runs the same claim, complete, fail, release, heartbeat), the single-URL
setup is untouched (a table's owner bypasses its policies), and a future statement is confined
too without anyone remembering to write a wrapper for it. Which role is which is data, not
schema: ``db_roles`` names each producer, reporting and consumer role (``scrapefleet db grant``
fills it), so this migration creates no cluster-wide role and runs anywhere.

- ``host_access``: the fields the producer trusts to reach a host (SSH address, port, user, key
  and known_hosts paths) move out of ``hosts``, which a consumer updates, into a table a
  consumer's role has no grant on. The data moves with them; downgrade moves it back. A
  trigger (not a foreign key, so that `TRUNCATE hosts` still works) deletes a host's access
  with its row.
- ``db_roles`` and two lookups the policies call once per statement (as an InitPlan):
  ``db_role_sees_all(role)`` (a producer or reporting role, or a member of one) and
  ``db_role_host(role)`` (a consumer role's host). A role in neither sees no row: fail closed.
  ``any_pending_job()`` tells a consumer's run-until-idle mode that work waits, without showing
  it a pending job.
- Policies on ``jobs``, ``hosts`` and ``host_events``: all rows for the roles that see all, a
  consumer's own rows otherwise. A consumer may hand its job back (host NULL: release, retry),
  never move it to another host, insert or delete one; ``jobs.last_host`` (set by a trigger
  when a job leaves its host) keeps a handed-back job visible to the host that let it go, as
  PostgreSQL requires of an UPDATE's new row, until another host takes it.
- The audit and webhook triggers run as their owner (SECURITY DEFINER, with a fixed search
  path), so a consumer's status change is still audited and announced while its role has no
  grant on job_events or webhook_deliveries to forge either.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TRUST_COLUMNS = ("address", "ssh_port", "ssh_user", "ssh_key_file", "known_hosts_file")
DEFINER_TRIGGER_FUNCTIONS = ("jobs_audit()", "jobs_webhook_enqueue()")
DUTIES = "('producer', 'reporting', 'consumer')"
ACCESS_COMMENT = "How the producer reaches each host (SSH); no consumer role may write it"
ROLES_COMMENT = "Database roles by duty (scrapefleet db grant): whom the row policies let see what"

# A trigger, not a foreign key: a host's access goes with its row, and `TRUNCATE hosts` (the
# tests' and benchmarks' reset) keeps working without naming host_access.
FORGET_ACCESS_FUNCTION = """
CREATE FUNCTION hosts_forget_access() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM host_access;
    ELSE
        DELETE FROM host_access WHERE host = OLD.name;
    END IF;
    RETURN NULL;
END
$$
"""

# SECURITY DEFINER: a consumer's role reads nothing of db_roles but its answer. pg_roles is
# joined so that a role dropped by hand (still listed) cannot make pg_has_role raise.
LOOKUPS = """
CREATE FUNCTION db_role_sees_all(caller name) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT EXISTS (
        SELECT 1 FROM db_roles r JOIN pg_roles p ON p.rolname = r.role_name
        WHERE r.duty IN ('producer', 'reporting') AND pg_has_role(caller, p.oid, 'USAGE'))
$$;
CREATE FUNCTION db_role_host(caller name) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT host FROM db_roles WHERE role_name = caller AND duty = 'consumer'
$$;
"""
# Whether any job waits for assignment, for a consumer's run-until-idle mode: the consumer's
# role sees no pending job (none is its own yet), and learns only this one bit about them.
ANY_PENDING = """
CREATE FUNCTION any_pending_job() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT EXISTS (SELECT 1 FROM jobs WHERE status = 'pending')
$$;
"""
SEES_ALL = "(SELECT db_role_sees_all(current_user))"
OWN_HOST = "(SELECT db_role_host(current_user))"

# A job a consumer hands back (release, retry, requeue) leaves with host NULL. PostgreSQL checks
# an UPDATE's new row against the SELECT policy too, so the row must stay visible to the host
# that let it go: the trigger notes that host in last_host, and the policy shows it the job
# until another host takes it. It sees no other pending job.
REMEMBER_HOST_FUNCTION = """
CREATE FUNCTION jobs_remember_host() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_host := OLD.host;
    RETURN NEW;
END
$$
"""
OWN_JOB = f"host = {OWN_HOST}"
HANDED_BACK = f"(host IS NULL AND last_host = {OWN_HOST})"

# (table, policy, command, USING, WITH CHECK)
POLICIES = (
    ("jobs", "jobs_read", "SELECT", f"{OWN_JOB} OR {HANDED_BACK}", None),
    ("jobs", "jobs_write", "UPDATE", OWN_JOB, f"{OWN_JOB} OR {HANDED_BACK}"),
    ("jobs", "jobs_insert", "INSERT", None, "false"),
    ("jobs", "jobs_delete", "DELETE", "false", None),
    ("hosts", "hosts_own", "ALL", f"name = {OWN_HOST}", f"name = {OWN_HOST}"),
    ("host_events", "host_events_own", "ALL", f"host = {OWN_HOST}", f"host = {OWN_HOST}"),
)
RLS_TABLES = ("jobs", "hosts", "host_events")


def _pin_search_path(function: str) -> None:
    # A definer function must not resolve names through a schema its caller can write to.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        f"'ALTER FUNCTION {function} SET search_path = %I, pg_temp', current_schema());"
        " END $$"
    )


def upgrade() -> None:
    op.create_table(
        "host_access",
        sa.Column("host", sa.Text, primary_key=True),
        sa.Column("address", sa.Text),
        sa.Column("ssh_port", sa.Integer, nullable=False, server_default="22"),
        sa.Column("ssh_user", sa.Text, nullable=False, server_default="scrapefleet"),
        sa.Column("ssh_key_file", sa.Text),
        sa.Column("known_hosts_file", sa.Text),
        comment=ACCESS_COMMENT,
    )
    op.execute(FORGET_ACCESS_FUNCTION)
    op.execute(
        "CREATE TRIGGER hosts_forget_access AFTER DELETE ON hosts"
        " FOR EACH ROW EXECUTE FUNCTION hosts_forget_access()"
    )
    op.execute(
        "CREATE TRIGGER hosts_forget_all_access AFTER TRUNCATE ON hosts"
        " FOR EACH STATEMENT EXECUTE FUNCTION hosts_forget_access()"
    )
    columns = ", ".join(TRUST_COLUMNS)
    op.execute(f"INSERT INTO host_access (host, {columns}) SELECT name, {columns} FROM hosts")
    for column in TRUST_COLUMNS:
        op.drop_column("hosts", column)

    op.create_table(
        "db_roles",
        sa.Column("role_name", sa.Text, primary_key=True),
        sa.Column("duty", sa.Text, nullable=False),
        sa.Column("host", sa.Text),
        sa.CheckConstraint(f"duty IN {DUTIES}", name="db_roles_duty_valid"),
        sa.CheckConstraint(
            "(duty = 'consumer') = (host IS NOT NULL)", name="db_roles_host_iff_consumer"
        ),
        comment=ROLES_COMMENT,
    )
    op.execute(LOOKUPS)
    op.execute(ANY_PENDING)
    for function in ("db_role_sees_all(name)", "db_role_host(name)", "any_pending_job()"):
        _pin_search_path(function)

    op.add_column("jobs", sa.Column("last_host", sa.Text))
    op.add_column("jobs_archive", sa.Column("last_host", sa.Text))
    op.execute(REMEMBER_HOST_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_remember_host BEFORE UPDATE OF host ON jobs FOR EACH ROW"
        " WHEN (OLD.host IS NOT NULL AND NEW.host IS NULL) EXECUTE FUNCTION jobs_remember_host()"
    )
    for table in RLS_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    for table, policy, command, using, check in POLICIES:
        # Every policy lets the producer and reporting roles through; a role in db_roles as
        # neither is a consumer, limited to its own host; any other role sees nothing.
        clauses = [f"CREATE POLICY {policy} ON {table} FOR {command}"]
        if using is not None:
            clauses.append(f"USING ({SEES_ALL} OR {using})")
        if check is not None:
            clauses.append(f"WITH CHECK ({SEES_ALL} OR {check})")
        op.execute(" ".join(clauses))

    for function in DEFINER_TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} SECURITY DEFINER")
        _pin_search_path(function)


def downgrade() -> None:
    for function in DEFINER_TRIGGER_FUNCTIONS:
        op.execute(f"ALTER FUNCTION {function} SECURITY INVOKER RESET search_path")
    for table, policy, *_ in POLICIES:
        op.execute(f"DROP POLICY IF EXISTS {policy} ON {table}")
    for table in RLS_TABLES:
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute("DROP TRIGGER jobs_remember_host ON jobs")
    op.execute("DROP FUNCTION jobs_remember_host()")
    op.drop_column("jobs_archive", "last_host")
    op.drop_column("jobs", "last_host")
    op.execute("DROP FUNCTION IF EXISTS any_pending_job()")
    op.execute("DROP FUNCTION IF EXISTS db_role_host(name)")
    op.execute("DROP FUNCTION IF EXISTS db_role_sees_all(name)")
    op.drop_table("db_roles")

    op.add_column("hosts", sa.Column("address", sa.Text))
    op.add_column("hosts", sa.Column("ssh_port", sa.Integer, nullable=False, server_default="22"))
    op.add_column(
        "hosts", sa.Column("ssh_user", sa.Text, nullable=False, server_default="scrapefleet")
    )
    op.add_column("hosts", sa.Column("ssh_key_file", sa.Text))
    op.add_column("hosts", sa.Column("known_hosts_file", sa.Text))
    op.execute(
        "UPDATE hosts h SET "
        + ", ".join(f"{c} = a.{c}" for c in TRUST_COLUMNS)
        + " FROM host_access a WHERE a.host = h.name"
    )
    op.drop_table("host_access")
    op.execute("DROP TRIGGER hosts_forget_all_access ON hosts")
    op.execute("DROP TRIGGER hosts_forget_access ON hosts")
    op.execute("DROP FUNCTION hosts_forget_access()")
