"""A consumer writes its host row only through functions; what hosts write is bounded.

- ``host_register``, ``host_set_state``, ``host_heartbeat``, ``host_count_claims`` and
  ``host_set_stack_counter``: every write a consumer makes to its ``hosts`` row (SECURITY
  DEFINER, fixed search path). A consumer's role (``db_roles``) writes only its own row, and
  only the moves a consumer makes (``statuses.TRANSITIONS``, actor consumer): never out of
  ``disabled``, out of ``draining`` only when the consumer drained the host itself (its own
  reason), with its heartbeat at the database's ``now()`` and its counters within bounds. The
  producer and the owner (one URL for everything) call the same functions unrestricted; any
  other role is refused. `scrapefleet db grant` no longer grants a consumer UPDATE or INSERT on
  ``hosts``, and this migration revokes them from the consumer roles already granted: with no
  UPDATE privilege a consumer's role can take no row lock on ``hosts`` either.
- Row locks: the producer and the operators' commands must never wait for a host row its
  consumer holds locked (a consumer's own transaction may sit idle for as long as it likes).
  ``host_set_state`` takes the row with SKIP LOCKED when asked (the producer's moves: the host is
  skipped this cycle); an operator's command locks the row first under a short lock_timeout.
- ``db_role_host(role)`` answers only for a role the session may act as (its own login, or
  one it is a member of): a consumer's role cannot learn which role is which host's.
- ``spawn_children``: a child's priority is at most its parent's, and a crawl that names the
  kinds it may spawn (``crawl_runs.spawn_kinds``; `scrapefleet crawl` sets its root's kind)
  gets no other kind.
- CHECK constraints: the times a host or job row holds are finite and within years 2000-3000
  (``'infinity'`` made every tool that read it crash); ``jobs.artifacts`` is a JSON object.
  Rows already out of bounds are cleared first (the times NULL where they may be, now()
  otherwise; artifacts not an object kept under ``{"invalid": ...}``).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")
_CLAIMS = importlib.import_module("scrapefleet.migrations.versions.0016_attempt_claims")

OWN_DRAIN_REASON = "consumer stopping"  # consumer.serving.OWN_DRAIN_REASON
MAX_REASON_CHARS = 1000
MAX_BOOT_ID_CHARS = 200
MAX_COUNT = 1000  # jobs one claim counts, or a browser stack's in-flight count
# statuses.TRANSITIONS, actor consumer, on hosts: (from, to). Leaving draining is allowed only
# from the consumer's own drain (state_reason = OWN_DRAIN_REASON).
CONSUMER_MOVES = (
    ("restarting", "active"),
    ("rebooting", "active"),
    ("offline", "active"),
    ("draining", "active"),
    ("active", "draining"),
    ("draining", "offline"),
    ("active", "restarting"),
    ("active", "rebooting"),
    ("restarting", "rebooting"),
)
MOVES_SQL = "ARRAY[" + ", ".join(f"'{a}>{b}'" for a, b in CONSUMER_MOVES) + "]"

# Who may write p_name's row: its consumer's role (true), the producer or the owner (false,
# unrestricted); anyone else is refused. Called by the definer functions, where session_user is
# still the login that called them.
CALLER_FUNCTION = """
CREATE FUNCTION host_writer_is_consumer(p_name text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    own text := db_role_host(session_user);
    owner_oid oid := (SELECT relowner FROM pg_class WHERE oid = 'hosts'::regclass);
BEGIN
    IF own IS NOT NULL THEN
        IF p_name IS DISTINCT FROM own THEN
            RAISE EXCEPTION 'role % may write host %''s row only', session_user, own
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN true;
    END IF;
    IF pg_has_role(session_user, owner_oid, 'MEMBER') OR EXISTS (
        SELECT 1 FROM db_roles r JOIN pg_roles p ON p.rolname = r.role_name
        WHERE r.duty = 'producer' AND pg_has_role(session_user, p.oid, 'MEMBER'))
    THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'role % may not write host rows', session_user
        USING ERRCODE = 'insufficient_privilege';
END
$$
"""

REGISTER_FUNCTION = f"""
CREATE FUNCTION host_register(p_name text, p_capacity int, p_boot_id text)
RETURNS TABLE (capacity int, state text, jobs_since_restart int, jobs_since_boot int,
               created boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
BEGIN
    PERFORM host_writer_is_consumer(p_name);
    IF p_capacity IS NULL OR p_capacity NOT BETWEEN 1 AND 64
       OR length(p_boot_id) > {MAX_BOOT_ID_CHARS} THEN
        RAISE EXCEPTION 'host_register: capacity 1-64, boot id up to {MAX_BOOT_ID_CHARS} chars'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO hosts (name, capacity) VALUES (p_name, p_capacity)
        ON CONFLICT (name) DO NOTHING;
    created := FOUND;
    -- A new boot id resets the since-boot counter.
    UPDATE hosts h SET boot_id = p_boot_id, heartbeat_at = now(),
        jobs_since_boot = CASE WHEN h.boot_id IS DISTINCT FROM p_boot_id
                               THEN 0 ELSE h.jobs_since_boot END
        WHERE h.name = p_name
        RETURNING h.capacity, h.state, h.jobs_since_restart, h.jobs_since_boot
        INTO capacity, state, jobs_since_restart, jobs_since_boot;
    RETURN NEXT;
END
$$
"""

# Returns the state moved out of, or NULL when nothing moved (no row, already there, not in
# one of p_expected, or with p_skip_locked, locked by another session: the producer's moves
# skip a host its consumer holds, and come back next cycle).
SET_STATE_FUNCTION = f"""
CREATE FUNCTION host_set_state(p_name text, p_to text, p_reason text, p_expected text[],
                               p_skip_locked boolean)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    consumer boolean := host_writer_is_consumer(p_name);
    old record;
BEGIN
    IF NOT p_skip_locked THEN
        SELECT h.state, h.state_reason INTO old FROM hosts h WHERE h.name = p_name
            FOR NO KEY UPDATE;
    ELSE
        SELECT h.state, h.state_reason INTO old FROM hosts h WHERE h.name = p_name
            FOR NO KEY UPDATE SKIP LOCKED;
    END IF;
    IF NOT FOUND OR (p_expected IS NOT NULL AND old.state <> ALL(p_expected)) THEN
        RETURN NULL;
    END IF;
    -- Already there: nothing to do, except that an operator's drain takes over a drain the
    -- consumer started for its own stop (else the consumer's next start would undo it).
    IF old.state = p_to AND (consumer OR p_to <> 'draining'
        OR old.state_reason IS DISTINCT FROM '{OWN_DRAIN_REASON}'
        OR p_reason IS NOT DISTINCT FROM '{OWN_DRAIN_REASON}') THEN
        RETURN NULL;
    END IF;
    -- An operator's drain stays: its consumer's move out of it does not happen (not an error:
    -- the consumer may have read its own drain just before the operator's took over).
    IF consumer AND old.state = 'draining'
       AND old.state_reason IS DISTINCT FROM '{OWN_DRAIN_REASON}' THEN
        RETURN NULL;
    END IF;
    IF consumer AND old.state || '>' || p_to <> ALL({MOVES_SQL}) THEN
        RAISE EXCEPTION 'host %: its consumer may not move it from % to %', p_name, old.state, p_to
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE hosts SET state = p_to, state_reason = left(p_reason, {MAX_REASON_CHARS}),
        state_changed_at = now()
        WHERE name = p_name;
    RETURN old.state;
END
$$
"""

HEARTBEAT_FUNCTION = """
CREATE FUNCTION host_heartbeat(p_name text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    now_state text;
BEGIN
    PERFORM host_writer_is_consumer(p_name);
    UPDATE hosts SET heartbeat_at = now() WHERE name = p_name RETURNING state INTO now_state;
    RETURN now_state;
END
$$
"""

# A claim's jobs counted in the host's budgets (browser jobs drive restarts and reboots).
COUNT_CLAIMS_FUNCTION = f"""
CREATE FUNCTION host_count_claims(p_name text, p_jobs int, p_browser int)
RETURNS TABLE (jobs_since_restart int, jobs_since_boot int)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
BEGIN
    PERFORM host_writer_is_consumer(p_name);
    IF p_jobs NOT BETWEEN 0 AND {MAX_COUNT} OR p_browser NOT BETWEEN 0 AND p_jobs THEN
        RAISE EXCEPTION 'host_count_claims: 0 <= browser <= jobs <= {MAX_COUNT}'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    UPDATE hosts h SET jobs_since_restart = h.jobs_since_restart + p_browser,
        jobs_since_boot = h.jobs_since_boot + p_browser, jobs_total = h.jobs_total + p_jobs
        WHERE h.name = p_name
        RETURNING h.jobs_since_restart, h.jobs_since_boot;
END
$$
"""

STACK_COUNTER_FUNCTION = f"""
CREATE FUNCTION host_set_stack_counter(p_name text, p_jobs int) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM host_writer_is_consumer(p_name);
    IF p_jobs NOT BETWEEN 0 AND {MAX_COUNT} THEN
        RAISE EXCEPTION 'host_set_stack_counter: 0 <= jobs <= {MAX_COUNT}'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE hosts SET jobs_since_restart = p_jobs WHERE name = p_name;
END
$$
"""

DEFINER_FUNCTIONS = (
    "host_register(text, integer, text)",
    "host_set_state(text, text, text, text[], boolean)",
    "host_heartbeat(text)",
    "host_count_claims(text, integer, integer)",
    "host_set_stack_counter(text, integer)",
)

# Answers only for a role this session may act as: the policies call it with current_user.
ROLE_HOST_FUNCTION = """
CREATE OR REPLACE FUNCTION db_role_host(caller name) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT r.host FROM db_roles r JOIN pg_roles p ON p.rolname = r.role_name
    WHERE r.role_name = caller AND r.duty = 'consumer'
      AND pg_has_role(session_user, p.oid, 'MEMBER')
$$
"""
ROLE_HOST_FUNCTION_0008 = """
CREATE OR REPLACE FUNCTION db_role_host(caller name) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT host FROM db_roles WHERE role_name = caller AND duty = 'consumer'
$$
"""

# spawn_children (0012, parents checked by their claim since 0016) with the child's priority
# capped at its parent's and the kinds a crawl names. The rest of the function is 0016's, text
# for text.
PRIORITY_0012 = "coalesce((child->>'priority')::int, parent.priority)"
PRIORITY_CAPPED = "least(coalesce((child->>'priority')::int, parent.priority), parent.priority)"
KINDS_0012 = "WITH ORDINALITY AS e(child, n)),"
KINDS_CHECKED = (
    "WITH ORDINALITY AS e(child, n)\n"
    "        WHERE bounds.spawn_kinds IS NULL OR e.child->>'kind' = ANY(bounds.spawn_kinds)),"
)
BOUNDS_0012 = "SELECT max_depth, max_jobs, jobs_count INTO bounds"
BOUNDS_KINDS = "SELECT max_depth, max_jobs, jobs_count, spawn_kinds INTO bounds"


def _spawn_function(capped: bool) -> str:
    # 0016's function (each parent checked by its claim), which this one extends.
    text = _CLAIMS._spawn_by_claim()
    for old, new in (
        (PRIORITY_0012, PRIORITY_CAPPED),
        (KINDS_0012, KINDS_CHECKED),
        (BOUNDS_0012, BOUNDS_KINDS),
    ):
        assert text.count(old) == 1, old  # 0012's text is frozen: fail loudly if it moved
        if capped:
            text = text.replace(old, new)
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


# The times a host or a job row holds: finite, and within years a reader's datetime can hold.
SANE_TIME = "{c} IS NULL OR ({c} > '2000-01-01 00:00+00' AND {c} < '3000-01-01 00:00+00')"
HOST_TIMES = ("state_changed_at", "last_seen_at", "heartbeat_at", "browser_retry_at")
JOB_TIMES = ("not_before", "queued_at", "started_at", "finished_at", "heartbeat_at")
NOT_NULL_TIMES = {("hosts", "state_changed_at")}
ARTIFACTS_OBJECT = "artifacts IS NULL OR jsonb_typeof(artifacts) = 'object'"


def _time_checks() -> list[tuple[str, str, str]]:
    return [
        (table, column, f"{table}_{column}_sane")
        for table, columns in (("hosts", HOST_TIMES), ("jobs", JOB_TIMES))
        for column in columns
    ]


def _for_each_consumer(statement: str) -> None:
    """``statement`` (with %I for the role) for every consumer role db grant made: the roles
    are data here, not schema."""
    op.execute(
        "DO $$ DECLARE r record; BEGIN"
        " FOR r IN SELECT role_name FROM db_roles d JOIN pg_roles p ON p.rolname = d.role_name"
        "   WHERE d.duty = 'consumer' LOOP"
        f"   EXECUTE format('{statement}', r.role_name);"
        " END LOOP; END $$"
    )


def upgrade() -> None:
    op.execute(CALLER_FUNCTION)
    for function in (
        REGISTER_FUNCTION,
        SET_STATE_FUNCTION,
        HEARTBEAT_FUNCTION,
        COUNT_CLAIMS_FUNCTION,
        STACK_COUNTER_FUNCTION,
    ):
        op.execute(function)
    _ROLES._pin_search_path("host_writer_is_consumer(text)")
    for function in DEFINER_FUNCTIONS:
        _ROLES._pin_search_path(function)
    op.execute(ROLE_HOST_FUNCTION)
    _ROLES._pin_search_path("db_role_host(name)")  # CREATE OR REPLACE dropped the pin
    _for_each_consumer("REVOKE INSERT, UPDATE ON hosts FROM %I")

    op.add_column("crawl_runs", sa.Column("spawn_kinds", sa.ARRAY(sa.Text)))
    op.execute(_spawn_function(capped=True))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")

    for table, column, name in _time_checks():
        bad = f"NOT ({SANE_TIME.format(c=column)})"
        value = "now()" if (table, column) in NOT_NULL_TIMES else "NULL"
        op.execute(f"UPDATE {table} SET {column} = {value} WHERE {bad}")
        op.create_check_constraint(name, table, SANE_TIME.format(c=column))
    op.execute(
        "UPDATE jobs SET artifacts = jsonb_build_object('invalid', artifacts)"
        f" WHERE NOT ({ARTIFACTS_OBJECT})"
    )
    op.create_check_constraint("jobs_artifacts_object", "jobs", ARTIFACTS_OBJECT)


def downgrade() -> None:
    op.drop_constraint("jobs_artifacts_object", "jobs", type_="check")
    for table, _column, name in _time_checks():
        op.drop_constraint(name, table, type_="check")
    op.execute(_spawn_function(capped=False))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")
    op.drop_column("crawl_runs", "spawn_kinds")
    _for_each_consumer(
        "GRANT INSERT (name, capacity), UPDATE (state, state_reason, state_changed_at, boot_id,"
        " heartbeat_at, jobs_since_restart, jobs_since_boot, jobs_total) ON hosts TO %I"
    )
    op.execute(ROLE_HOST_FUNCTION_0008)
    _ROLES._pin_search_path("db_role_host(name)")
    for function in DEFINER_FUNCTIONS:
        op.execute(f"DROP FUNCTION {function}")
    op.execute("DROP FUNCTION host_writer_is_consumer(text)")
