"""What a consumer's role writes is bounded where it enters, third round.

- Times. CHECKs (finite, within years 2000-3000, as 0017's) on the times 0017 left out that a
  consumer's role writes: ``jobs.lingering_until``, ``profiles.cooldown_until`` and
  ``host_events.at`` (an ``'infinity'`` there stopped every producer cycle that read the
  profile, held a lock key fleet-wide for ever, and gave the host page a 500). And a window of
  now for a consumer's writes (the trigger functions ``<table>_consumer_times_bounded``): no time it
  writes lies further ahead than its use allows (``CONSUMER_TIME_WINDOWS``). Operators and the
  producer keep writing far times (a job submitted for next month). The error names the column.
- A consumer's moves of its jobs (the policy ``jobs_write``): it updates only its jobs queued or
  processing, and leaves them processing, completed or failed on its host, or pending (or
  failed) handed back. So it can no longer end an attempt rate limited yet keep the job, claim
  it again and renew the site's pause at will, nor move a finished job back to processing: a
  pause (``not_before`` on a job it ends ``rate_limited``) is set once per attempt, and the
  producer still caps it at ``retry_after_max_s``.
- Sizes. CHECKs on what a job row holds: ``result`` (its JSON text) at most
  ``RESULT_MAX_BYTES``, ``last_error`` ``LAST_ERROR_MAX_CHARS`` characters, ``artifacts``
  ``ARTIFACTS_MAX_BYTES``: a host wrote tens of MB, which the producer copied into a webhook
  delivery and loaded whole, as did `jobs show` and the job page. Rows already over are cut
  first (a result or artifacts replaced by a note of their size, an error's end kept). The
  audit trigger keeps at most 1,000 characters of the message a writer sets.
- Spawns (``spawn_children``). Outside a crawl (whose ``spawn_kinds`` still rule), a child is
  of its parent's kind or of a kind its parent's action declares (``jobs.spawn_kinds``, set at
  submit from the registry and passed on to the children); other kinds are dropped, as a
  crawl's are. A child's payload is at most ``SPAWN_PAYLOAD_MAX_BYTES`` and its dedupe key
  2,048 characters, else the call is refused. And a consumer's host inserts at most
  ``fleet_limits.spawn_per_host_per_minute`` children a minute (the producer writes its
  setting there at start; ``hosts.spawn_window_started_at`` and ``spawned_in_window`` count
  them): a call past it is refused, inserting nothing (a fake host inserted 44,999 jobs in
  30 s, ahead of every user's).
- The producer's channels. PostgreSQL lets every role NOTIFY any channel (NOTIFY has no
  privilege to revoke), and a consumer's role flooded the producer's wake channel. The
  producer now LISTENs on channels whose names carry a random key (``fleet_secrets``, no
  grant to anyone but the owner): ``fleet_channel(base)`` names them, for the producer's
  role and the owner only. The NOTIFYs come from triggers that run as the owner: a job
  submitted (``jobs_notify_submitted``), a job leaving processing (``jobs_notify_finished``,
  new: the consumers' statements no longer NOTIFY), a webhook delivery enqueued. A consumer's
  role can so wake the producer only by finishing an attempt of its own. Each host's own
  assignment channel is named from the key too (``host_channel(host)``: a consumer's role
  learns its own host's only), so no consumer's role can wake another host's consumer.
- ``hosts.name``: the rule of every host name in the settings (``HOST_NAME``: letters, digits
  and '-' in labels separated by dots, at most 253 characters): no '/', '..' or newline in a
  name a consumer's role registers (it becomes a role's name, a status file's, a log field).
  A database that holds such a name already gets the CHECK unvalidated (new rows checked).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-28
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")
_CLASSES = importlib.import_module("scrapefleet.migrations.versions.0010_error_classes")
_SPAWN = importlib.import_module("scrapefleet.migrations.versions.0024_one_spawn_per_job")

# Migration 0017's rule, for the times it left out.
SANE_TIME = "{c} IS NULL OR ({c} > '2000-01-01 00:00+00' AND {c} < '3000-01-01 00:00+00')"
NEW_SANE_TIMES = (
    ("jobs", "lingering_until"),
    ("profiles", "cooldown_until"),
    ("host_events", "at"),
)
NOT_NULL_TIMES = {("host_events", "at")}

# How far ahead of now a time a consumer's role writes may lie, by (table, column), in
# seconds: a retry or a site's Retry-After (common.constants.RETRY_AFTER_LIMIT_S, the most
# retry_after_max_s and backoff_max_s may be), a timed-out attempt's lock linger
# (LOCK_LINGER_LIMIT_S), a blocked profile's rest (profile_block_cooldown_s, at most 30 days),
# each with an hour more for clock skew (a retry's time is the consumer's clock's), and that
# hour for the times that say "now".
DAY_S = 86400
SKEW_S = 3600
CONSUMER_TIME_WINDOWS = {
    ("jobs", "not_before"): 7 * DAY_S + SKEW_S,
    ("jobs", "lingering_until"): DAY_S + SKEW_S,
    ("jobs", "queued_at"): SKEW_S,
    ("jobs", "started_at"): SKEW_S,
    ("jobs", "finished_at"): SKEW_S,
    ("jobs", "heartbeat_at"): SKEW_S,
    ("profiles", "cooldown_until"): 30 * DAY_S + SKEW_S,
    ("host_events", "at"): SKEW_S,
}
TIME_TABLES = ("jobs", "profiles", "host_events")


def _window_checks(table: str) -> str:
    lines = []
    for (t, column), seconds in CONSUMER_TIME_WINDOWS.items():
        if t != table:
            continue
        lines.append(
            f"    IF NEW.{column} IS NOT NULL AND NOT (NEW.{column} < now() + interval"
            f" '{seconds} seconds') THEN\n"
            f"        bad := '{table}.{column}'; bad_value := NEW.{column}::text;"
            f" limit_s := {seconds};\n"
            "    END IF;"
        )
    return "\n".join(lines)


def _times_function(table: str) -> str:
    # Values within the window (nearly every write) return at once; the caller is looked up
    # only for a value beyond it, so the producer's batched writes pay nothing. current_user,
    # not session_user: a definer function acting for a consumer (spawn_children) is trusted.
    return f"""
CREATE FUNCTION {table}_consumer_times_bounded() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
    bad_value text;
    limit_s int;
BEGIN
{_window_checks(table)}
    IF bad IS NULL OR db_role_host(current_user) IS NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '%: % is further ahead than a consumer may write (at most % s from now)',
        bad, bad_value, limit_s USING ERRCODE = 'check_violation', COLUMN = split_part(bad, '.', 2),
        TABLE = '{table}';
END
$$
"""


def _times_trigger(table: str) -> str:
    columns = ", ".join(c for t, c in CONSUMER_TIME_WINDOWS if t == table)
    event = "INSERT OR UPDATE" if table != "host_events" else "INSERT"
    if table != "host_events":
        event = f"INSERT OR UPDATE OF {columns}"
    return (
        f"CREATE TRIGGER {table}_consumer_times_bounded BEFORE {event} ON {table}"
        f" FOR EACH ROW EXECUTE FUNCTION {table}_consumer_times_bounded()"
    )


# A consumer's job moves (statuses.TRANSITIONS, actor consumer): from queued or processing
# only; to processing, completed or failed on its host, or handed back (pending, or failed
# when a release ends it) with host NULL.
MOVABLE = "status IN ('queued', 'processing')"
MOVED_TO = (
    f"({_ROLES.OWN_JOB} AND status IN ('processing', 'completed', 'failed'))"
    f" OR ({_ROLES.HANDED_BACK} AND status IN ('pending', 'failed'))"
)


# common.constants.RESULT_MAX_BYTES_LIMIT, LAST_ERROR_MAX_CHARS, ARTIFACTS_MAX_BYTES, as they
# are today (a test holds them together).
RESULT_MAX_BYTES = 8 * 1024 * 1024
LAST_ERROR_MAX_CHARS = 64 * 1024
ARTIFACTS_MAX_BYTES = 64 * 1024
# (constraint, CHECK, what an existing row over it becomes)
SIZE_CHECKS = (
    (
        "jobs_result_size",
        f"result IS NULL OR octet_length(result::text) <= {RESULT_MAX_BYTES}",
        "result = jsonb_build_object('invalid', 'over the size cap',"
        " 'bytes', octet_length(result::text))",
    ),
    (
        "jobs_last_error_size",
        f"last_error IS NULL OR char_length(last_error) <= {LAST_ERROR_MAX_CHARS}",
        f"last_error = right(last_error, {LAST_ERROR_MAX_CHARS})",
    ),
    (
        "jobs_artifacts_size",
        f"artifacts IS NULL OR octet_length(artifacts::text) <= {ARTIFACTS_MAX_BYTES}",
        "artifacts = jsonb_build_object('invalid', 'over the size cap')",
    ),
)
AUDIT_MESSAGE_CHARS = 1000
AUDIT_REPLACEMENTS = (
    (
        "message text := nullif(current_setting('scrapefleet.audit_message', true), '');",
        "message text := left(nullif(current_setting('scrapefleet.audit_message', true), ''),"
        f" {AUDIT_MESSAGE_CHARS});",
    ),
    (
        r"THEN (regexp_match(NEW.last_error, '([^\n]+)\s*$'))[1] END",
        r"THEN left((regexp_match(NEW.last_error, '([^\n]+)\s*$'))[1],"
        f" {AUDIT_MESSAGE_CHARS}) END",
    ),
)


def _audit_function(bounded: bool) -> str:
    text = _CLASSES.AUDIT_FUNCTION
    for old, new in AUDIT_REPLACEMENTS:
        assert text.count(old) == 1, old  # 0010's text is frozen: fail loudly if it moved
        if bounded:
            text = text.replace(old, new)
    return text


# common.constants.SPAWN_PAYLOAD_MAX_BYTES and SPAWN_PER_HOST_PER_MINUTE (the setting's default)
SPAWN_PAYLOAD_MAX_BYTES = 64 * 1024
SPAWN_PER_HOST_PER_MINUTE = 6000
MAX_DEDUPE_KEY_CHARS = 2048  # common.actions.spawn's
LIMITS_COMMENT = (
    "Limits the producer sets from its settings at start for what consumers' roles may do: "
    "`spawn_per_host_per_minute` (children one host's role may insert a minute). One row"
)
SPAWN_REPLACEMENTS = (
    (
        "SELECT id, depth, crawl_id, priority, max_attempts, spawned_claim INTO parent FROM jobs",
        "SELECT id, depth, crawl_id, priority, max_attempts, spawned_claim, kind, spawn_kinds"
        " INTO parent FROM jobs",
    ),
    (
        "WHERE bounds.spawn_kinds IS NULL OR e.child->>'kind' = ANY(bounds.spawn_kinds)),",
        "WHERE e.child->>'kind' = ANY(coalesce(bounds.spawn_kinds,\n"
        "            parent.kind || coalesce(parent.spawn_kinds, '{}'::text[])))),",
    ),
    ("parent_id, depth, crawl_id)", "parent_id, depth, crawl_id, spawn_kinds)"),
    (
        "parent.id, parent.depth + 1, crawl\n",
        "parent.id, parent.depth + 1, crawl, parent.spawn_kinds\n",
    ),
    (
        "    bounds record;\n",
        "    bounds record;\n"
        "    rate_limited boolean := db_role_host(session_user) IS NOT NULL;\n"
        "    spawned int;\n"
        "    per_minute int := coalesce((SELECT spawn_per_host_per_minute FROM fleet_limits),"
        f" {SPAWN_PER_HOST_PER_MINUTE});\n",
    ),
    (
        "        children_inserted := 0;\n",
        "        children_inserted := 0;\n"
        "        IF EXISTS (SELECT 1 FROM jsonb_array_elements(item->'children') AS c(child)\n"
        "                   WHERE octet_length((child->'payload')::text)"
        f" > {SPAWN_PAYLOAD_MAX_BYTES}\n"
        f"                      OR length(child->>'dedupe_key') > {MAX_DEDUPE_KEY_CHARS}) THEN\n"
        "            RAISE EXCEPTION 'spawn_children: a child of job % has a payload over %"
        f" bytes or a dedupe key over {MAX_DEDUPE_KEY_CHARS} characters',\n"
        f"                parent.id, {SPAWN_PAYLOAD_MAX_BYTES}"
        " USING ERRCODE = 'program_limit_exceeded';\n"
        "        END IF;\n",
    ),
    (
        "UPDATE crawl_runs SET jobs_count = jobs_count + children_inserted WHERE id = crawl;\n",
        "UPDATE crawl_runs SET jobs_count = jobs_count + children_inserted WHERE id = crawl;\n"
        "            IF rate_limited AND children_inserted > 0 THEN\n"
        "                UPDATE hosts SET\n"
        "                    spawned_in_window = children_inserted + CASE\n"
        "                        WHEN spawn_window_started_at > now() - interval '1 minute'\n"
        "                        THEN spawned_in_window ELSE 0 END,\n"
        "                    spawn_window_started_at = CASE\n"
        "                        WHEN spawn_window_started_at > now() - interval '1 minute'\n"
        "                        THEN spawn_window_started_at ELSE now() END\n"
        "                    WHERE name = caller_host RETURNING spawned_in_window INTO spawned;\n"
        "                IF spawned > per_minute THEN\n"
        "                    RAISE EXCEPTION 'spawn_children: host % inserted % jobs within a"
        " minute, over spawn_per_host_per_minute (%)', caller_host, spawned, per_minute\n"
        "                        USING ERRCODE = 'program_limit_exceeded';\n"
        "                END IF;\n"
        "            END IF;\n",
    ),
)


def _spawn_function(bounded: bool) -> str:
    text = _SPAWN.spawn_function(marked=True)
    for old, new in SPAWN_REPLACEMENTS:
        assert text.count(old) == 1, old  # 0024's text is frozen: fail loudly if it moved
        if bounded:
            text = text.replace(old, new)
    return text


# common.setting_groups.operator_settings.HOST_NAME, in PostgreSQL's regular expressions.
LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME_CHECK = rf"char_length(name) <= 253 AND name ~ '^{LABEL}(\.{LABEL})*\.?$'"


SECRETS_COMMENT = (
    "The key in the names of the producer's NOTIFY channels (fleet_channel): readable by the "
    "owner only. One row"
)
# The name of one of the producer's channels: base (common.constants.CHANNEL_*) and the key.
# Only the definer triggers and fleet_channel call it (no EXECUTE for anyone else).
CHANNEL_OF_FUNCTION = """
CREATE FUNCTION fleet_channel_of(p_base text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT p_base || '_' || coalesce((SELECT channel_key FROM fleet_secrets), '')
$$
"""
# For the producer's role (and members of the owner): the names to LISTEN on.
CHANNEL_FUNCTION = """
CREATE FUNCTION fleet_channel(p_base text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
DECLARE
    owner_oid oid := (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass);
BEGIN
    IF NOT (pg_has_role(session_user, owner_oid, 'MEMBER') OR EXISTS (
        SELECT 1 FROM db_roles r JOIN pg_roles p ON p.rolname = r.role_name
        WHERE r.duty = 'producer' AND pg_has_role(session_user, p.oid, 'MEMBER')))
    THEN
        RAISE EXCEPTION 'role % may not learn the producer''s channels', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN fleet_channel_of(p_base);
END
$$
"""
# The channel a host's consumer is woken on (common.constants.CHANNEL_ASSIGNED and a digest of
# the key and the host's name: an identifier's 63 bytes whatever the name): the producer's role
# and the owner may ask for any host's, a consumer's role for its own host's only.
HOST_CHANNEL_FUNCTION = """
CREATE FUNCTION host_channel(p_host text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
DECLARE
    own text := db_role_host(session_user);
BEGIN
    IF own IS NULL THEN
        PERFORM fleet_channel('scrapefleet_assigned');  -- the producer's role or the owner
    ELSIF own IS DISTINCT FROM p_host THEN
        RAISE EXCEPTION 'role % may learn host %''s channel only', session_user, own
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN 'scrapefleet_assigned_' || left(encode(sha256(convert_to(
        coalesce((SELECT channel_key FROM fleet_secrets), '') || '/' || p_host, 'UTF8')),
        'hex'), 24);
END
$$
"""
# common.constants.CHANNEL_SUBMITTED, CHANNEL_FINISHED, CHANNEL_WEBHOOKS_DUE
CHANNEL_SUBMITTED = "scrapefleet_submitted"
CHANNEL_FINISHED = "scrapefleet_finished"
CHANNEL_WEBHOOKS_DUE = "scrapefleet_webhooks_due"


def _notify_function(name: str, channel: str, payload: str, keyed: bool) -> str:
    target = f"fleet_channel_of('{channel}')" if keyed else f"'{channel}'"
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify({target}, {payload});
    RETURN NULL;
END
$$
"""


NOTIFY_TRIGGER_FUNCTIONS = (
    ("jobs_notify_submitted", CHANNEL_SUBMITTED, "''"),
    ("webhook_deliveries_notify", CHANNEL_WEBHOOKS_DUE, "''"),
    ("jobs_notify_finished", CHANNEL_FINISHED, "coalesce(OLD.host, '')"),
)
# One NOTIFY per host and transaction (PostgreSQL folds identical ones): a batch of completions
# wakes the producer once.
FINISHED_TRIGGER = (
    "CREATE TRIGGER jobs_notify_finished AFTER UPDATE OF status ON jobs FOR EACH ROW"
    " WHEN (OLD.status = 'processing' AND NEW.status <> 'processing')"
    " EXECUTE FUNCTION jobs_notify_finished()"
)


def _keyed_notifies(keyed: bool) -> None:
    for name, channel, payload in NOTIFY_TRIGGER_FUNCTIONS:
        if name == "jobs_notify_finished" and not keyed:
            continue
        op.execute(_notify_function(name, channel, payload, keyed))
        if keyed:
            op.execute(f"ALTER FUNCTION {name}() SECURITY DEFINER")
            _ROLES._pin_search_path(f"{name}()")
        else:
            op.execute(f"ALTER FUNCTION {name}() SECURITY INVOKER RESET search_path")


def _jobs_write(using: str, check: str) -> str:
    return (
        f"ALTER POLICY jobs_write ON jobs USING ({_ROLES.SEES_ALL} OR {using})"
        f" WITH CHECK ({_ROLES.SEES_ALL} OR {check})"
    )


def upgrade() -> None:
    for table, column in NEW_SANE_TIMES:
        bad = f"NOT ({SANE_TIME.format(c=column)})"
        value = "now()" if (table, column) in NOT_NULL_TIMES else "NULL"
        op.execute(f"UPDATE {table} SET {column} = {value} WHERE {bad}")
        op.create_check_constraint(f"{table}_{column}_sane", table, SANE_TIME.format(c=column))
    for table in TIME_TABLES:
        op.execute(_times_function(table))
        op.execute(_times_trigger(table))
    op.execute(_jobs_write(f"({_ROLES.OWN_JOB} AND {MOVABLE})", MOVED_TO))
    for name, check, cut in SIZE_CHECKS:
        op.execute(f"UPDATE jobs SET {cut} WHERE NOT ({check})")
        op.create_check_constraint(name, "jobs", check)
    _CLASSES._audit_function(_audit_function(bounded=True))

    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("spawn_kinds", sa.ARRAY(sa.Text)))
    op.add_column("hosts", sa.Column("spawn_window_started_at", sa.DateTime(timezone=True)))
    op.add_column(
        "hosts", sa.Column("spawned_in_window", sa.Integer, nullable=False, server_default="0")
    )
    op.create_table(
        "fleet_limits",
        sa.Column("one", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column(
            "spawn_per_host_per_minute",
            sa.Integer,
            nullable=False,
            server_default=str(SPAWN_PER_HOST_PER_MINUTE),
        ),
        sa.CheckConstraint("one", name="fleet_limits_one_row"),
        sa.CheckConstraint("spawn_per_host_per_minute >= 1", name="fleet_limits_spawn_positive"),
        comment=LIMITS_COMMENT,
    )
    op.execute(_spawn_function(bounded=True))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")

    op.create_table(
        "fleet_secrets",
        sa.Column("one", sa.Boolean, primary_key=True, server_default=sa.true()),
        sa.Column("channel_key", sa.Text, nullable=False),
        sa.CheckConstraint("one", name="fleet_secrets_one_row"),
        comment=SECRETS_COMMENT,
    )
    # The schema's default privileges granted it to the producer and reporting roles.
    op.execute(
        "DO $$ DECLARE r record; BEGIN"
        " REVOKE ALL ON fleet_secrets FROM PUBLIC;"
        " FOR r IN SELECT role_name FROM db_roles d JOIN pg_roles p ON p.rolname = d.role_name"
        " LOOP EXECUTE format('REVOKE ALL ON fleet_secrets FROM %I', r.role_name); END LOOP;"
        " END $$"
    )
    op.execute(
        "INSERT INTO fleet_secrets (channel_key)"
        " VALUES (left(replace(gen_random_uuid()::text, '-', ''), 20))"
    )
    for function in (CHANNEL_OF_FUNCTION, CHANNEL_FUNCTION, HOST_CHANNEL_FUNCTION):
        op.execute(function)
    for function in ("fleet_channel_of(text)", "fleet_channel(text)", "host_channel(text)"):
        _ROLES._pin_search_path(function)
    op.execute("REVOKE EXECUTE ON FUNCTION fleet_channel_of(text) FROM PUBLIC")
    _keyed_notifies(keyed=True)
    op.execute(FINISHED_TRIGGER)

    op.execute(
        f"ALTER TABLE hosts ADD CONSTRAINT hosts_name_valid CHECK ({HOST_NAME_CHECK}) NOT VALID"
    )
    op.execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM hosts WHERE NOT"
        f" ({HOST_NAME_CHECK})) THEN"
        " EXECUTE 'ALTER TABLE hosts VALIDATE CONSTRAINT hosts_name_valid'; END IF; END $$"
    )


def downgrade() -> None:
    op.drop_constraint("hosts_name_valid", "hosts", type_="check")
    op.execute("DROP TRIGGER jobs_notify_finished ON jobs")
    _keyed_notifies(keyed=False)
    op.execute("DROP FUNCTION jobs_notify_finished()")
    op.execute("DROP FUNCTION host_channel(text)")
    op.execute("DROP FUNCTION fleet_channel(text)")
    op.execute("DROP FUNCTION fleet_channel_of(text)")
    op.drop_table("fleet_secrets")
    op.execute(_spawn_function(bounded=False))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")
    op.drop_table("fleet_limits")
    op.drop_column("hosts", "spawned_in_window")
    op.drop_column("hosts", "spawn_window_started_at")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "spawn_kinds")
    _CLASSES._audit_function(_audit_function(bounded=False))
    for name, _check, _cut in SIZE_CHECKS:
        op.drop_constraint(name, "jobs", type_="check")
    op.execute(_jobs_write(_ROLES.OWN_JOB, f"{_ROLES.OWN_JOB} OR {_ROLES.HANDED_BACK}"))
    for table in TIME_TABLES:
        op.execute(f"DROP TRIGGER {table}_consumer_times_bounded ON {table}")
        op.execute(f"DROP FUNCTION {table}_consumer_times_bounded()")
    for table, column in NEW_SANE_TIMES:
        op.drop_constraint(f"{table}_{column}_sane", table, type_="check")
