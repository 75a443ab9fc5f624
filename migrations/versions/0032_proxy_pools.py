"""Proxy pools: proxies the fleet leases to jobs, one per attempt, and each lease's outcome.

- ``proxy_pools``: a named pool and its settings (per-proxy cap on jobs at once, the block
  back-off, the ban rule, the HTTP statuses that mean a block for plain HTTP jobs).
- ``proxies``: one row per proxy of a pool, its URL *without* credentials, its state and use.
- ``proxy_credentials``: each proxy's user name and password, apart, so that a grant on every
  table (the reporting role's, the dashboard's) does not reach them: the reporting role's
  grant on it is revoked here and by `scrapefleet db grant`; a consumer's role has no grant on
  any of these tables.
- ``identity_leases``: one row per assignment of a job under a proxy or a profile (which
  one, when), and how that attempt ended for it (``blocked``, ``error``, ``ok``): the ban
  rates of the ``identity_health`` view are counted here.
- ``jobs.proxy_pool`` (what the job asked for) and ``jobs.proxy_id`` (the proxy leased to its
  current or last attempt, set by the producer as it assigns); ``jobs.proxy_session`` and
  ``proxy_sessions``: a sticky session's jobs go out through one proxy until a block or
  ``session_max_uses`` retires it.
- Two SECURITY DEFINER functions are all a consumer's role reaches: ``proxy_for_attempt``
  answers the credentials of the proxy leased to a job *processing on the caller's host* under
  that claim, and ``identity_charge`` records how the attempt ended for its proxy (a block:
  cool-down growing with consecutive blocks, a ban past the pool's threshold, and after
  ``escalate_after_blocks`` blocks of one job on a pool that names a ``next_pool``, the job
  moved to that pool (tiers); an unreachable proxy: a short cool-down; a success: the back-off
  forgotten). Neither takes a number from
  the caller beyond the job, its claim and one of three words.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # common.identities.proxy_pools.POOL_NAME_SQL
IN_FLIGHT = "status IN ('queued', 'processing')"
POOLS_COMMENT = (
    "Named proxy pools and their settings: `max_jobs_per_proxy` (jobs at once on one proxy), "
    "`session_max_uses` (a sticky session's jobs on one proxy), "
    "`cooldown_s` and `max_cooldown_s` (a blocked proxy's back-off, doubled per consecutive "
    "block), `ban_blocks` within `ban_window_s` ban a proxy for `ban_s`, `error_cooldown_s` "
    "(an unreachable proxy), `block_statuses` (HTTP statuses that mean a block), `next_pool` "
    "(a job blocked `escalate_after_blocks` times here leases from it next)"
)
PROXIES_COMMENT = (
    "One row per proxy of a pool: `url` (without credentials), `has_credentials`, `state` "
    "(`ready`, `cooling`, `banned`, `disabled`), `jobs` (leased), `blocks`, `errors` "
    "(unreachable), `consecutive_blocks`, `last_used_at`, `cooldown_until`, `banned_until`"
)
CREDENTIALS_COMMENT = (
    "Each proxy's user name and password; no reporting or consumer role may read it (a "
    "consumer gets the one it leased through proxy_for_attempt)"
)
LEASES_COMMENT = (
    "One row per assignment of a job under a proxy or a profile: `job_id`, `proxy_id`, "
    "`profile`, `at`, `outcome` (`leased`, `ok`, `blocked`, `error`) and `ended_at`"
)
SESSIONS_COMMENT = (
    "Sticky sessions of a pool: `key` (a job's `session`: the site's host for \"site\"), the "
    "`proxy_id` its jobs go out through, `uses`, `started_at`, `last_used_at`, `retired_at` (a "
    "block or `session_max_uses` ends it: the next job starts a new session on another proxy)"
)
HEALTH_COMMENT = (
    "Ban rates per proxy and per profile: `identity` (proxy URL without credentials, or "
    "profile name), `pool`, `state`, `jobs`, `blocks`, jobs and blocks and `ban_rate` over the "
    "last hour and day, `cooldown_until`, `banned_until`"
)

# Whether the calling login may act for ``host``: that host's consumer role, or the owner or
# the producer (who act for every host). Reporting and other roles may not.
CALLER_FOR_HOST = """
CREATE FUNCTION identity_caller_may(p_host text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN db_role_host(session_user) IS NOT NULL
                THEN db_role_host(session_user) = p_host
                ELSE pg_has_role(session_user,
                       (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass), 'MEMBER')
                  OR EXISTS (SELECT 1 FROM db_roles r JOIN pg_roles p ON p.rolname = r.role_name
                     WHERE r.duty = 'producer' AND pg_has_role(session_user, p.oid, 'MEMBER'))
           END
$$
"""

# The leased proxy of a job this caller's host runs under this claim, with its credentials and
# the HTTP statuses its pool takes for a block; no row for any other job, claim, status or host.
FOR_ATTEMPT = """
CREATE FUNCTION proxy_for_attempt(p_job bigint, p_claim int)
RETURNS TABLE (url text, username text, password text, block_statuses int[])
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT p.url, c.username, c.password, pp.block_statuses
    FROM jobs j JOIN proxies p ON p.id = j.proxy_id
    JOIN proxy_pools pp ON pp.name = p.pool
    LEFT JOIN proxy_credentials c ON c.proxy_id = p.id
    WHERE j.id = p_job AND j.claims = p_claim AND j.status = 'processing'
      AND identity_caller_may(j.host)
$$
"""

# How the attempt ended for its identities. Blocked: the proxy cools down for cooldown_s doubled
# per consecutive block (at most max_cooldown_s), and is banned for ban_s once ban_blocks of its
# leases ended blocked within ban_window_s. Error: a short cool-down, no ban. Ok: its
# consecutive blocks forgotten. The job's latest open lease row says how it ended. Returns the
# proxy's state after, or NULL when the job (under that claim, processing on the caller's host)
# holds no proxy.
CHARGE = """
CREATE FUNCTION identity_charge(p_job bigint, p_claim int, p_outcome text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    j record;
    pool record;
    px record;
    recent int;
    new_state text;
BEGIN
    IF p_outcome NOT IN ('ok', 'blocked', 'error') THEN
        RAISE EXCEPTION 'identity_charge: outcome must be ok, blocked or error'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT id, host, proxy_id, profile, proxy_session INTO j FROM jobs
        WHERE id = p_job AND claims = p_claim AND status = 'processing';
    IF NOT FOUND OR NOT identity_caller_may(j.host) THEN
        RETURN NULL;
    END IF;
    UPDATE identity_leases SET outcome = p_outcome, ended_at = now()
        WHERE id = (SELECT max(id) FROM identity_leases
                    WHERE job_id = p_job AND outcome = 'leased');
    IF j.proxy_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT * INTO px FROM proxies WHERE id = j.proxy_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- removed by an operator meanwhile
    END IF;
    SELECT * INTO pool FROM proxy_pools WHERE name = px.pool;
    IF p_outcome = 'ok' THEN
        UPDATE proxies SET consecutive_blocks = 0 WHERE id = px.id AND consecutive_blocks > 0;
        RETURN px.state;
    END IF;
    IF p_outcome = 'error' THEN
        UPDATE proxies SET errors = errors + 1,
            state = CASE WHEN state IN ('disabled', 'banned') THEN state ELSE 'cooling' END,
            cooldown_until = greatest(cooldown_until,
                now() + make_interval(secs => pool.error_cooldown_s))
            WHERE id = px.id RETURNING state INTO new_state;
        RETURN new_state;
    END IF;
    -- A blocked session is over: its next job starts a new one, on another proxy.
    UPDATE proxy_sessions AS s SET retired_at = now()
        WHERE s.pool = px.pool AND s.key = j.proxy_session AND s.proxy_id = px.id
          AND s.retired_at IS NULL;
    -- Tiers: the job's blocks on this pool's proxies reach the pool's bound: its next attempt
    -- leases from the next pool.
    IF pool.next_pool IS NOT NULL AND (
        SELECT count(*) FROM identity_leases l JOIN proxies q ON q.id = l.proxy_id
        WHERE l.job_id = p_job AND l.outcome = 'blocked' AND q.pool = px.pool
    ) >= pool.escalate_after_blocks THEN
        UPDATE jobs SET proxy_pool = pool.next_pool WHERE id = p_job;
    END IF;
    SELECT count(*) INTO recent FROM identity_leases
        WHERE proxy_id = px.id AND outcome = 'blocked'
          AND ended_at > now() - make_interval(secs => pool.ban_window_s);
    UPDATE proxies SET blocks = blocks + 1, consecutive_blocks = consecutive_blocks + 1,
        cooldown_until = greatest(cooldown_until, now() + make_interval(secs => least(
            pool.max_cooldown_s, pool.cooldown_s * power(2, least(consecutive_blocks, 30))))),
        banned_until = CASE WHEN pool.ban_blocks > 0 AND recent >= pool.ban_blocks
            THEN greatest(banned_until, now() + make_interval(secs => pool.ban_s))
            ELSE banned_until END,
        state = CASE WHEN state = 'disabled' THEN state
            WHEN pool.ban_blocks > 0 AND recent >= pool.ban_blocks THEN 'banned'
            WHEN state = 'banned' AND banned_until > now() THEN state
            ELSE 'cooling' END
        WHERE id = px.id RETURNING state INTO new_state;
    RETURN new_state;
END
$$
"""
DEFINER_FUNCTIONS = ("proxy_for_attempt(bigint, integer)", "identity_charge(bigint, integer, text)")

HEALTH_VIEW = """
CREATE VIEW identity_health AS
WITH recent AS (
  SELECT proxy_id, profile,
    count(*) FILTER (WHERE at > now() - interval '1 hour') AS jobs_hour,
    count(*) FILTER (WHERE outcome = 'blocked' AND ended_at > now() - interval '1 hour')
      AS blocks_hour,
    count(*) AS jobs_day,
    count(*) FILTER (WHERE outcome = 'blocked') AS blocks_day
  FROM identity_leases WHERE at > now() - interval '1 day'
  GROUP BY proxy_id, profile
)
SELECT 'proxy' AS kind, p.pool, p.id AS proxy_id,
  CASE WHEN p.has_credentials THEN replace(p.url, '://', '://***@') ELSE p.url END
    AS identity,
  CASE WHEN p.state = 'disabled' THEN 'disabled'
       WHEN p.banned_until > now() THEN 'banned'
       WHEN p.cooldown_until > now() THEN 'cooling'
       ELSE 'ready' END AS state,
  p.jobs, p.blocks, p.errors,
  coalesce(sum(r.jobs_hour), 0)::bigint AS jobs_last_hour,
  coalesce(sum(r.blocks_hour), 0)::bigint AS blocks_last_hour,
  round(coalesce(sum(r.blocks_hour), 0) / greatest(sum(r.jobs_hour), 1), 3) AS ban_rate_hour,
  coalesce(sum(r.jobs_day), 0)::bigint AS jobs_last_day,
  coalesce(sum(r.blocks_day), 0)::bigint AS blocks_last_day,
  round(coalesce(sum(r.blocks_day), 0) / greatest(sum(r.jobs_day), 1), 3) AS ban_rate_day,
  p.last_used_at, p.cooldown_until, p.banned_until
FROM proxies p LEFT JOIN recent r ON r.proxy_id = p.id
GROUP BY p.id
UNION ALL
SELECT 'profile', NULL, NULL, pr.name,
  CASE WHEN pr.cooldown_until > now() THEN 'cooling' ELSE 'ready' END,
  pr.jobs, pr.blocks, 0,
  coalesce(sum(r.jobs_hour), 0)::bigint, coalesce(sum(r.blocks_hour), 0)::bigint,
  round(coalesce(sum(r.blocks_hour), 0) / greatest(sum(r.jobs_hour), 1), 3),
  coalesce(sum(r.jobs_day), 0)::bigint, coalesce(sum(r.blocks_day), 0)::bigint,
  round(coalesce(sum(r.blocks_day), 0) / greatest(sum(r.jobs_day), 1), 3),
  pr.last_used_at, pr.cooldown_until, NULL
FROM profiles pr LEFT JOIN recent r ON r.profile = pr.name AND r.proxy_id IS NULL
GROUP BY pr.name
"""

REVOKE_FROM_REPORTING = """
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT role_name FROM db_roles JOIN pg_roles ON rolname = role_name
             WHERE duty IN ('reporting', 'consumer') LOOP
        EXECUTE format('REVOKE ALL ON proxy_credentials FROM %I', r.role_name);
    END LOOP;
END $$
"""


def _pin_search_path(function: str) -> None:
    # A definer function must not resolve names through a schema its caller can write to.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        f"'ALTER FUNCTION {function} SET search_path = %I, pg_temp', current_schema());"
        " END $$"
    )


def upgrade() -> None:
    op.create_table(
        "proxy_pools",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("max_jobs_per_proxy", sa.Integer, nullable=False, server_default="1"),
        sa.Column("cooldown_s", sa.Float, nullable=False, server_default="60"),
        sa.Column("max_cooldown_s", sa.Float, nullable=False, server_default="3600"),
        sa.Column("ban_blocks", sa.Integer, nullable=False, server_default="5"),
        sa.Column("ban_window_s", sa.Float, nullable=False, server_default="3600"),
        sa.Column("ban_s", sa.Float, nullable=False, server_default="86400"),
        sa.Column("error_cooldown_s", sa.Float, nullable=False, server_default="30"),
        sa.Column(
            "block_statuses",
            sa.ARRAY(sa.Integer),
            nullable=False,
            server_default=sa.text("'{403,429}'"),
        ),
        # Tiers: a job of this pool blocked escalate_after_blocks times here moves to next_pool.
        sa.Column("next_pool", sa.Text),
        sa.Column("escalate_after_blocks", sa.Integer, nullable=False, server_default="2"),
        # Sticky sessions: a session's proxy serves at most this many of its jobs.
        sa.Column("session_max_uses", sa.Integer, nullable=False, server_default="50"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.ForeignKeyConstraint(
            ["next_pool"],
            ["proxy_pools.name"],
            name="proxy_pools_next_pool_fkey",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint("next_pool IS DISTINCT FROM name", name="proxy_pools_next_not_self"),
        sa.CheckConstraint("escalate_after_blocks >= 1", name="proxy_pools_escalate_after_valid"),
        sa.CheckConstraint("session_max_uses >= 1", name="proxy_pools_session_uses_valid"),
        sa.CheckConstraint(f"name ~ '{NAME_PATTERN}'", name="proxy_pools_name_valid"),
        sa.CheckConstraint("max_jobs_per_proxy BETWEEN 1 AND 1000", name="proxy_pools_cap_valid"),
        sa.CheckConstraint(
            "cooldown_s >= 0 AND max_cooldown_s >= cooldown_s AND ban_blocks >= 0"
            " AND ban_window_s > 0 AND ban_s >= 0 AND error_cooldown_s >= 0",
            name="proxy_pools_times_valid",
        ),
        comment=POOLS_COMMENT,
    )
    op.create_table(
        "proxies",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "pool",
            sa.Text,
            sa.ForeignKey("proxy_pools.name", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("has_credentials", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("state", sa.Text, nullable=False, server_default="ready"),
        sa.Column("jobs", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("blocks", sa.Integer, nullable=False, server_default="0"),
        sa.Column("errors", sa.Integer, nullable=False, server_default="0"),
        sa.Column("consecutive_blocks", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_used_at", TS),
        sa.Column("cooldown_until", TS),
        sa.Column("banned_until", TS),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.UniqueConstraint("pool", "url", name="proxies_pool_url_key"),
        sa.CheckConstraint(
            "state IN ('ready', 'cooling', 'banned', 'disabled')", name="proxies_state_valid"
        ),
        sa.CheckConstraint("url !~ '@'", name="proxies_url_without_credentials"),
        comment=PROXIES_COMMENT,
    )
    op.create_table(
        "proxy_credentials",
        sa.Column(
            "proxy_id",
            sa.BigInteger,
            sa.ForeignKey("proxies.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("username", sa.Text, nullable=False),
        sa.Column("password", sa.Text, nullable=False),
        comment=CREDENTIALS_COMMENT,
    )
    op.create_table(
        "identity_leases",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("proxy_id", sa.BigInteger),
        sa.Column("profile", sa.Text),
        sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("outcome", sa.Text, nullable=False, server_default="leased"),
        sa.Column("ended_at", TS),
        sa.CheckConstraint(
            "outcome IN ('leased', 'ok', 'blocked', 'error')", name="identity_leases_outcome"
        ),
        comment=LEASES_COMMENT,
    )
    op.create_table(
        "proxy_sessions",
        sa.Column(
            "pool",
            sa.Text,
            sa.ForeignKey("proxy_pools.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("proxy_id", sa.BigInteger, nullable=False),
        sa.Column("uses", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_used_at", TS),
        sa.Column("retired_at", TS),
        comment=SESSIONS_COMMENT,
    )
    op.create_index("identity_leases_job_idx", "identity_leases", ["job_id"])
    op.create_index("identity_leases_proxy_idx", "identity_leases", ["proxy_id", "at"])
    op.create_index("identity_leases_at_brin", "identity_leases", ["at"], postgresql_using="brin")
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("proxy_pool", sa.Text))
        op.add_column(table, sa.Column("proxy_id", sa.BigInteger))
        op.add_column(table, sa.Column("proxy_session", sa.Text))
    op.create_index(
        "jobs_proxy_in_flight_idx",
        "jobs",
        ["proxy_id"],
        postgresql_where=sa.text(f"proxy_id IS NOT NULL AND {IN_FLIGHT}"),
    )
    op.execute(CALLER_FOR_HOST)
    op.execute(FOR_ATTEMPT)
    op.execute(CHARGE)
    for function in DEFINER_FUNCTIONS:
        _pin_search_path(function)
    _pin_search_path("identity_caller_may(text)")
    op.execute(HEALTH_VIEW)
    op.execute(f"COMMENT ON VIEW identity_health IS '{HEALTH_COMMENT}'")
    op.execute("REVOKE ALL ON proxy_credentials FROM PUBLIC")
    op.execute(REVOKE_FROM_REPORTING)


def downgrade() -> None:
    op.execute("DROP VIEW identity_health")
    op.execute("DROP FUNCTION identity_charge(bigint, integer, text)")
    op.execute("DROP FUNCTION proxy_for_attempt(bigint, integer)")
    op.execute("DROP FUNCTION identity_caller_may(text)")
    op.drop_index("jobs_proxy_in_flight_idx", table_name="jobs")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "proxy_session")
        op.drop_column(table, "proxy_id")
        op.drop_column(table, "proxy_pool")
    op.drop_table("identity_leases")
    op.drop_table("proxy_sessions")
    op.drop_table("proxy_credentials")
    op.drop_table("proxies")
    op.drop_table("proxy_pools")
