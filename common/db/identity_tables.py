"""The identities' tables (migration 0032): ``proxy_pools`` and their ``proxies``, the proxies'
``proxy_credentials`` (apart, so that no grant on every table reaches them) and
``identity_leases`` (each assignment under a proxy or a profile, and how it ended: the ban
rates of the ``identity_health`` view). Profiles themselves are in host_tables (bound to hosts).

Alembic migrations create them; tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common.db.schema_base import TS, metadata
from scrapefleet.common.identities.proxy_pools import POOL_NAME_SQL, LeaseOutcome, ProxyState

_STATES = ", ".join(f"'{s.value}'" for s in ProxyState)
_OUTCOMES = ", ".join(f"'{o.value}'" for o in LeaseOutcome)

proxy_pools = sa.Table(
    "proxy_pools",
    metadata,
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
        ["next_pool"], ["proxy_pools.name"], name="proxy_pools_next_pool_fkey", ondelete="SET NULL"
    ),
    sa.CheckConstraint("next_pool IS DISTINCT FROM name", name="proxy_pools_next_not_self"),
    sa.CheckConstraint("escalate_after_blocks >= 1", name="proxy_pools_escalate_after_valid"),
    sa.CheckConstraint("session_max_uses >= 1", name="proxy_pools_session_uses_valid"),
    sa.CheckConstraint(f"name ~ '{POOL_NAME_SQL}'", name="proxy_pools_name_valid"),
    sa.CheckConstraint("max_jobs_per_proxy BETWEEN 1 AND 1000", name="proxy_pools_cap_valid"),
    sa.CheckConstraint(
        "cooldown_s >= 0 AND max_cooldown_s >= cooldown_s AND ban_blocks >= 0"
        " AND ban_window_s > 0 AND ban_s >= 0 AND error_cooldown_s >= 0",
        name="proxy_pools_times_valid",
    ),
    comment=(
        "Named proxy pools and their settings: `max_jobs_per_proxy` (jobs at once on one "
        "proxy), `session_max_uses` (a sticky session's jobs on one proxy), `cooldown_s` and "
        "`max_cooldown_s` (a blocked proxy's back-off, doubled per consecutive block), "
        "`ban_blocks` within `ban_window_s` ban a proxy for `ban_s`, `error_cooldown_s` (an "
        "unreachable proxy), `block_statuses` (HTTP statuses that mean a block), `next_pool` "
        "(a job blocked `escalate_after_blocks` times here leases from it next)"
    ),
)

proxies = sa.Table(
    "proxies",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column(
        "pool", sa.Text, sa.ForeignKey("proxy_pools.name", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("has_credentials", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("state", sa.Text, nullable=False, server_default=ProxyState.READY.value),
    sa.Column("jobs", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("blocks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("errors", sa.Integer, nullable=False, server_default="0"),
    sa.Column("consecutive_blocks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_used_at", TS),
    sa.Column("cooldown_until", TS),
    sa.Column("banned_until", TS),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.UniqueConstraint("pool", "url", name="proxies_pool_url_key"),
    sa.CheckConstraint(f"state IN ({_STATES})", name="proxies_state_valid"),
    sa.CheckConstraint("url !~ '@'", name="proxies_url_without_credentials"),
    comment=(
        "One row per proxy of a pool: `url` (without credentials), `has_credentials`, `state` "
        "(`ready`, `cooling`, `banned`, `disabled`), `jobs` (leased), `blocks`, `errors` "
        "(unreachable), `consecutive_blocks`, `last_used_at`, `cooldown_until`, `banned_until`"
    ),
)

proxy_credentials = sa.Table(
    "proxy_credentials",
    metadata,
    sa.Column(
        "proxy_id",
        sa.BigInteger,
        sa.ForeignKey("proxies.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("username", sa.Text, nullable=False),
    sa.Column("password", sa.Text, nullable=False),
    comment=(
        "Each proxy's user name and password; no reporting or consumer role may read it (a "
        "consumer gets the one it leased through proxy_for_attempt)"
    ),
)

proxy_sessions = sa.Table(
    "proxy_sessions",
    metadata,
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
    comment=(
        "Sticky sessions of a pool: `key` (a job's `session`: the site's host for \"site\"), "
        "the `proxy_id` its jobs go out through, `uses`, `started_at`, `last_used_at`, "
        "`retired_at` (a block or `session_max_uses` ends it: the next job starts a new "
        "session on another proxy)"
    ),
)

proxy_session_jars = sa.Table(
    "proxy_session_jars",
    metadata,
    sa.Column("pool", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("session_started_at", TS, nullable=False),
    sa.Column("cookies", JSONB, nullable=False),
    sa.Column("user_agent", sa.Text),
    sa.ForeignKeyConstraint(
        ["pool", "key"],
        ["proxy_sessions.pool", "proxy_sessions.key"],
        name="proxy_session_jars_session_fkey",
        ondelete="CASCADE",
    ),
    comment=(
        "A sticky session's cookie jar and user agent (its `http_get` jobs send them and keep "
        "what the site sets), for the session started at `session_started_at` only; no "
        "reporting or consumer role may read it (a consumer reaches its own attempt's session "
        "through session_for_attempt and session_keep)"
    ),
)

identity_leases = sa.Table(
    "identity_leases",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("proxy_id", sa.BigInteger),
    sa.Column("profile", sa.Text),
    sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("outcome", sa.Text, nullable=False, server_default=LeaseOutcome.LEASED.value),
    sa.Column("ended_at", TS),
    sa.CheckConstraint(f"outcome IN ({_OUTCOMES})", name="identity_leases_outcome"),
    comment=(
        "One row per assignment of a job under a proxy or a profile: `job_id`, `proxy_id`, "
        "`profile`, `at`, `outcome` (`leased`, `ok`, `blocked`, `error`) and `ended_at`"
    ),
)
sa.Index("identity_leases_job_idx", identity_leases.c.job_id)
sa.Index("identity_leases_proxy_idx", identity_leases.c.proxy_id, identity_leases.c.at)
sa.Index("identity_leases_at_brin", identity_leases.c.at, postgresql_using="brin")
