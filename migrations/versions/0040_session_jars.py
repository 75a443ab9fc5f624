"""A sticky session's cookie jar and user agent, so that consecutive ``http_get`` jobs of one
session are one visitor: the same exit address (proxy_sessions), the cookies the site set on
the jobs before, the same User-Agent.

- ``proxy_session_jars``: one row per session, kept for the session it was written in
  (``session_started_at``): a session that starts again (after a block, past its pool's
  ``session_max_uses``, or on another proxy) starts with an empty jar. Cookies are secrets
  like a proxy's password: no reporting or consumer role may read the table (revoked here and
  by `scrapefleet db grant`).
- Two SECURITY DEFINER functions are all a consumer's role reaches: ``session_for_attempt``
  answers the jar of the live session of a job *processing on the caller's host* under that
  claim (a row of NULLs for a session with no jar yet; no row for a job in no live session),
  and ``session_keep`` stores the jar that attempt leaves (a JSON array, bounded; the user
  agent bounded) while the session is still the one the job went out in.

Revision ID: 0040
Revises: 0039
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
MAX_JAR_BYTES = 65536  # common.http.session_jar.MAX_JAR_BYTES
MAX_USER_AGENT_CHARS = 1024  # common.http.session_jar.MAX_USER_AGENT_CHARS
JARS_COMMENT = (
    "A sticky session's cookie jar and user agent (its `http_get` jobs send them and keep what "
    "the site sets), for the session started at `session_started_at` only; no reporting or "
    "consumer role may read it (a consumer reaches its own attempt's session through "
    "session_for_attempt and session_keep)"
)
# The live session a job processing under this claim on the caller's host went out in.
JOB_SESSION = """
    FROM jobs j JOIN proxy_sessions s
      ON s.pool = j.proxy_pool AND s.key = j.proxy_session AND s.proxy_id = j.proxy_id
    WHERE j.id = p_job AND j.claims = p_claim AND j.status = 'processing'
      AND s.retired_at IS NULL AND identity_caller_may(j.host)
"""
WITH_JAR = JOB_SESSION.replace(
    "WHERE",
    "LEFT JOIN proxy_session_jars sj ON sj.pool = s.pool AND sj.key = s.key"
    " AND sj.session_started_at = s.started_at\n    WHERE",
)
FOR_ATTEMPT = f"""
CREATE FUNCTION session_for_attempt(p_job bigint, p_claim int)
RETURNS TABLE (cookies jsonb, user_agent text)
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT sj.cookies, sj.user_agent
    {WITH_JAR}
$$
"""
KEEP = f"""
CREATE FUNCTION session_keep(p_job bigint, p_claim int, p_cookies jsonb, p_user_agent text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    live record;
BEGIN
    IF jsonb_typeof(p_cookies) IS DISTINCT FROM 'array'
       OR octet_length(p_cookies::text) > {MAX_JAR_BYTES}
       OR char_length(p_user_agent) > {MAX_USER_AGENT_CHARS} THEN
        RAISE EXCEPTION 'session_keep: %',
            'cookies must be a JSON array of at most {MAX_JAR_BYTES} bytes, the user agent'
            ' at most {MAX_USER_AGENT_CHARS} characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.pool, s.key, s.started_at INTO live
    {JOB_SESSION};
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO proxy_session_jars AS sj (pool, key, session_started_at, cookies, user_agent)
    VALUES (live.pool, live.key, live.started_at, p_cookies, p_user_agent)
    ON CONFLICT (pool, key) DO UPDATE SET session_started_at = EXCLUDED.session_started_at,
        cookies = EXCLUDED.cookies, user_agent = EXCLUDED.user_agent;
    RETURN true;
END
$$
"""
DEFINER_FUNCTIONS = (
    "session_for_attempt(bigint, integer)",
    "session_keep(bigint, integer, jsonb, text)",
)
REVOKE_FROM_ROLES = """
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT role_name FROM db_roles JOIN pg_roles ON rolname = role_name
             WHERE duty IN ('reporting', 'consumer') LOOP
        EXECUTE format('REVOKE ALL ON proxy_session_jars FROM %I', r.role_name);
    END LOOP;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "proxy_session_jars",
        sa.Column("pool", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("session_started_at", TS, nullable=False),
        sa.Column("cookies", sa.dialects.postgresql.JSONB, nullable=False),
        sa.Column("user_agent", sa.Text),
        sa.ForeignKeyConstraint(
            ["pool", "key"],
            ["proxy_sessions.pool", "proxy_sessions.key"],
            name="proxy_session_jars_session_fkey",
            ondelete="CASCADE",
        ),
        comment=JARS_COMMENT,
    )
    op.execute(FOR_ATTEMPT)
    op.execute(KEEP)
    for function in DEFINER_FUNCTIONS:
        # A definer function must not resolve names through a schema its caller can write to.
        op.execute(
            "DO $$ BEGIN EXECUTE format("
            f"'ALTER FUNCTION {function} SET search_path = %I, pg_temp', current_schema());"
            " END $$"
        )
    op.execute("REVOKE ALL ON proxy_session_jars FROM PUBLIC")
    op.execute(REVOKE_FROM_ROLES)


def downgrade() -> None:
    op.execute("DROP FUNCTION session_keep(bigint, integer, jsonb, text)")
    op.execute("DROP FUNCTION session_for_attempt(bigint, integer)")
    op.drop_table("proxy_session_jars")
