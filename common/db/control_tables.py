"""The tables that steer the fleet: ``fleet_control`` (fleet-wide operator switches),
``producers`` (one row per producer process), ``rate_keys`` (what the producer slows down or
limits), ``live_controls`` (what an operator pauses or limits live) and ``control_changes``
(every such change, append-only).

Together because they are what the producer reads each cycle to decide how much to assign,
besides the jobs and hosts themselves. Alembic migrations create them;
tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common.db.schema_base import TS, metadata

# ---------------------------------------------------------------- migration 0002: operator

# A single row (id is always true): fleet-wide switches an operator flips from the dashboard.
fleet_control = sa.Table(
    "fleet_control",
    metadata,
    sa.Column("id", sa.Boolean, primary_key=True, server_default=sa.text("true")),
    sa.Column("assignment_paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
    sa.Column("changed_by", sa.Text),
    sa.Column("changed_at", TS),
    sa.Column("reason", sa.Text),
    sa.CheckConstraint("id", name="fleet_control_single_row"),
    comment="Fleet-wide operator switches (one row): assignment paused, by whom, why",
)

# One row per producer process, written only by that process: the leader at each full cycle,
# a standby at each try for the lock (migration 0007). The ``fleet`` view reads it.
producers = sa.Table(
    "producers",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    # The producer's own producer_interval_s: readers judge its staleness by it, not by theirs.
    sa.Column("interval_s", sa.Float, nullable=False),
    # Only the producer knows whether it signs and sends webhooks; readers show it.
    sa.Column("webhook_secret_set", sa.Boolean, nullable=False),
    sa.Column("started_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("last_seen_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("last_cycle_at", TS),
    # The last full cycle that finished before last_cycle_at's (the current one is running).
    sa.Column("last_cycle_duration_s", sa.Float),
    sa.CheckConstraint("role IN ('leader', 'standby', 'stopped')", name="producers_role_valid"),
    comment=(
        "One row per producer process (name `host:pid`): role (`leader`, `standby`, "
        "`stopped`), version, its `interval_s`, `last_seen_at`, and for the leader "
        "`last_cycle_at` and `last_cycle_duration_s` (stamped in every full cycle's own "
        "transaction; a standby stamps `last_seen_at` at each try for the lock); rows unseen "
        "for 7 days are deleted when a producer starts"
    ),
)


# ---------------------------------------------------------------- migration 0013: rate limits

# One row per rate key the producer slows down (factor, pause) or has a configured limit for
# (named; the row "*" is the default for unnamed keys): written by the producer alone, read by
# the rate_limits view. No consumer role has a grant on it.
rate_keys = sa.Table(
    "rate_keys",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("named", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("concurrency", sa.Integer),
    sa.Column("per_minute", sa.Integer),
    sa.Column("factor", sa.Float, nullable=False, server_default="1"),
    sa.Column("paused_until", TS),
    sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.CheckConstraint("factor > 0 AND factor <= 1", name="rate_keys_factor_range"),
    sa.CheckConstraint("concurrency > 0 AND per_minute > 0", name="rate_keys_limits_positive"),
    comment=(
        "What the producer writes for that view: a row per named key and the default's (`*`),"
        " a row per key slowed down (`factor`, `paused_until`); no consumer role has a grant "
        "on it"
    ),
)

# ---------------------------------------------------------------- migration 0023: live controls

# One row per rate key, kind or crawl an operator paused or limited live
# (common.store.operating.controls); the producer reads it every cycle. A row that neither pauses
# nor limits is deleted.
live_controls = sa.Table(
    "live_controls",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("concurrency", sa.Integer),
    sa.Column("per_minute", sa.Integer),
    sa.Column("changed_by", sa.Text, nullable=False),
    sa.Column("changed_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("reason", sa.Text),
    sa.CheckConstraint("scope IN ('rate_key', 'kind', 'crawl')", name="live_controls_scope_valid"),
    sa.CheckConstraint("length(name) BETWEEN 1 AND 200", name="live_controls_name_length"),
    sa.CheckConstraint("concurrency > 0 AND per_minute > 0", name="live_controls_limits_positive"),
    sa.CheckConstraint(
        "scope <> 'crawl' OR (concurrency IS NULL AND per_minute IS NULL)",
        name="live_controls_crawls_pause_only",
    ),
    sa.CheckConstraint(
        "paused OR concurrency IS NOT NULL OR per_minute IS NOT NULL",
        name="live_controls_something",
    ),
    comment=(
        "What an operator holds live: one row per rate key, kind or crawl (`scope`, `name`) "
        "`paused` or limited (`concurrency`, `per_minute`), with `changed_by`, `changed_at`, "
        "`reason`"
    ),
)

# Every live control change, append-only.
control_changes = sa.Table(
    "control_changes",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("changed_by", sa.Text, nullable=False),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("change", sa.Text, nullable=False),
    sa.Column("before", JSONB),
    sa.Column("after", JSONB),
    sa.Column("reason", sa.Text),
    sa.CheckConstraint(
        "change IN ('pause', 'resume', 'limit', 'unlimit')", name="control_changes_change_valid"
    ),
    comment=(
        "Every live control change: `at`, `changed_by`, `scope`, `name`, `change` (pause, "
        "resume, limit, unlimit), `before`, `after`, `reason`"
    ),
)


# ---------------------------------------------------------------- migration 0031: fleet limits

# What the producer's settings say consumers' roles may do, where spawn_children reads it (a
# consumer's role has no grant here): one row, written by the producer at its start.
fleet_limits = sa.Table(
    "fleet_limits",
    metadata,
    sa.Column("one", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("spawn_per_host_per_minute", sa.Integer, nullable=False, server_default="6000"),
    sa.CheckConstraint("one", name="fleet_limits_one_row"),
    sa.CheckConstraint("spawn_per_host_per_minute >= 1", name="fleet_limits_spawn_positive"),
    comment=(
        "Limits the producer sets from its settings at start for what consumers' roles may "
        "do: `spawn_per_host_per_minute` (children one host's role may insert a minute). One row"
    ),
)

# The key in the producer's NOTIFY channels' names (fleet_channel): no role but the owner
# reads it, so no consumer's role can name, and flood, the channels the producer listens on.
fleet_secrets = sa.Table(
    "fleet_secrets",
    metadata,
    sa.Column("one", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("channel_key", sa.Text, nullable=False),
    sa.CheckConstraint("one", name="fleet_secrets_one_row"),
    comment=(
        "The key in the names of the producer's NOTIFY channels (fleet_channel): readable by "
        "the owner only. One row"
    ),
)
