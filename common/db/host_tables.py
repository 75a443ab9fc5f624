"""The hosts' tables: ``hosts`` (state, capacity, what the last probe and the consumer itself
reported), ``host_events`` (state changes, restarts, reboots), ``host_access`` (how the producer
reaches a host, kept out of the row the host writes), ``db_roles`` (which database role is the
producer, reporting, or which host's consumer) and ``profiles`` (persistent browser profiles, each
bound to a host).

Together because the row policies that keep one host's consumer to its own rows read them
together. Alembic migrations create them; tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common.browser.profile_names import PROFILE_NAME_SQL
from scrapefleet.common.db.schema_base import HOST_STATES, TS, column_in, metadata, sane_time
from scrapefleet.common.store import statuses

hosts = sa.Table(
    "hosts",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("capacity", sa.Integer, nullable=False, server_default="6"),
    sa.Column("state", sa.Text, nullable=False, server_default=statuses.HostState.ACTIVE.value),
    sa.Column("state_reason", sa.Text),
    sa.Column("state_changed_at", TS, nullable=False, server_default=sa.text("now()")),
    # How the producer reaches it lives in host_access (migration 0008): a consumer's role
    # writes this row (through the host_* functions of migration 0017), and must not be able
    # to point the producer elsewhere.
    # What the last probe and the consumer itself reported.
    sa.Column("boot_id", sa.Text),
    sa.Column("jobs_since_restart", sa.Integer, nullable=False, server_default="0"),
    sa.Column("jobs_since_boot", sa.Integer, nullable=False, server_default="0"),
    sa.Column("jobs_total", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("reported_running", sa.Integer),
    sa.Column("memory_available_bytes", sa.BigInteger),
    sa.Column("probe_failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_probe_error", sa.Text),
    # What its browser stack can do now (host_status.BrowserState), as last reported.
    sa.Column("browser_state", sa.Text),
    sa.Column("browser_reason", sa.Text),
    sa.Column("browser_retry_at", TS),
    # Browser jobs it takes at once now, and why fewer than its capacity
    # (consumer.browser.supervisor.load_rules).
    sa.Column("browser_limit", sa.Integer),
    sa.Column("browser_limit_reason", sa.Text),
    # The action kinds its consumer runs, kind -> version (common.status.document); NULL: any.
    sa.Column("kinds", JSONB),
    sa.Column("last_seen_at", TS),
    sa.Column("heartbeat_at", TS),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    # Migration 0031: the children its consumer's role inserted in the minute since the start
    # of the window (spawn_children, bounded by fleet_limits.spawn_per_host_per_minute).
    sa.Column("spawn_window_started_at", TS),
    sa.Column("spawned_in_window", sa.Integer, nullable=False, server_default="0"),
    sa.CheckConstraint(column_in("state", HOST_STATES), name="hosts_state_valid"),
    # Migration 0031: the settings' rule for host names (operator_settings.HOST_NAME).
    sa.CheckConstraint(
        "char_length(name) <= 253 AND name ~ '^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        "(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\\.?$'",
        name="hosts_name_valid",
    ),
    sa.CheckConstraint("capacity BETWEEN 1 AND 64", name="hosts_capacity_range"),
    sa.CheckConstraint(
        "kinds IS NULL OR (jsonb_typeof(kinds) = 'object' AND pg_column_size(kinds) <= 65536)",
        name="hosts_kinds_object",
    ),
    *(
        sane_time("hosts", c)
        for c in ("state_changed_at", "last_seen_at", "heartbeat_at", "browser_retry_at")
    ),
    comment=(
        "Consumer hosts: capacity, state and why, browser jobs since restart/boot, last "
        "probe, browser state and why"
    ),
)


host_events = sa.Table(
    "host_events",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),  # state change, restart, reboot, probe_failed ...
    sa.Column("from_state", sa.Text),
    sa.Column("to_state", sa.Text),
    sa.Column("at", TS, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("message", sa.Text),
    sa.Column("details", JSONB),
    sane_time("host_events", "at"),  # migration 0031
    comment="Host state changes, browser-stack restarts (with duration and memory), reboots",
)
sa.Index("host_events_host_at_idx", host_events.c.host, host_events.c.at)

# ---------------------------------------------------------------- migration 0008: roles by duty

# How the producer reaches a host (NULL address = a local probe on the producer's machine).
# Its own table, with no grant to any consumer role: the producer trusts these fields (it
# connects and authenticates by them), and a host's own row is writable by that host.
host_access = sa.Table(
    "host_access",
    metadata,
    # No foreign key: the trigger hosts_forget_access deletes the row with its host (and on
    # TRUNCATE hosts), so a reset that names only hosts still works.
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("address", sa.Text),
    sa.Column("ssh_port", sa.Integer, nullable=False, server_default="22"),
    sa.Column("ssh_user", sa.Text, nullable=False, server_default="scrapefleet"),
    sa.Column("ssh_key_file", sa.Text),
    sa.Column("known_hosts_file", sa.Text),
    comment=(
        "How the producer reaches each host: SSH `address`, `ssh_port`, `ssh_user`, "
        "`ssh_key_file`, `known_hosts_file` (kept out of `hosts`, which a consumer's role "
        "writes)"
    ),
)

# Which database role has which duty: the row policies on jobs, hosts and host_events read it
# (through db_role_sees_all / db_role_host), `scrapefleet db grant` writes it. A role listed
# nowhere sees no row of those tables unless it owns them.
db_roles = sa.Table(
    "db_roles",
    metadata,
    sa.Column("role_name", sa.Text, primary_key=True),
    sa.Column("duty", sa.Text, nullable=False),
    sa.Column("host", sa.Text),
    sa.CheckConstraint("duty IN ('producer', 'reporting', 'consumer')", name="db_roles_duty_valid"),
    sa.CheckConstraint(
        "(duty = 'consumer') = (host IS NOT NULL)", name="db_roles_host_iff_consumer"
    ),
    comment=(
        "Which database role is the producer, reporting, or which host's consumer (filled by "
        "`scrapefleet db grant`)"
    ),
)

# ---------------------------------------------------------------- migration 0011: profiles

# One row per persistent browser profile (common.browser.profile_names): the host it is bound to,
# its state and cool-down, its use. Row policies: a consumer's role sees and cools its own host's
# only.
profiles = sa.Table(
    "profiles",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("host", sa.Text),
    sa.Column("state", sa.Text, nullable=False, server_default="ready"),
    sa.Column("cooldown_until", TS),
    sa.Column("last_used_at", TS),
    sa.Column("jobs", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("blocks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    # Blocks since its last completed job: its next cool-down doubles with each (0039).
    sa.Column("consecutive_blocks", sa.Integer, nullable=False, server_default="0"),
    sa.CheckConstraint("state IN ('ready', 'cooling')", name="profiles_state_valid"),
    sa.CheckConstraint(f"name ~ '{PROFILE_NAME_SQL}'", name="profiles_name_valid"),
    sane_time("profiles", "cooldown_until"),  # migration 0031
    comment=(
        "One row per persistent browser profile: `name`, `host` (bound to it: its user-data-"
        "dir is there), `state` (`ready`, `cooling`), `cooldown_until` (no job before then), "
        "`last_used_at`, `jobs` (assigned under it), `blocks` (its jobs a site blocked), "
        "`created_at`. A consumer's role sees only its own host's rows. The jobs carry "
        "`profile_pool` (what the job named) and `profile` (the one chosen)"
    ),
)
sa.Index("profiles_host_idx", profiles.c.host)
