"""The declared schema. Alembic migrations create it; a test checks they agree.

Tables are a user interface (ops read them at a psql prompt), so names say what they hold:
``jobs``, ``hosts``, ``job_events`` (one row per job status change, written by a trigger so
that even a hand-written UPDATE is audited), ``host_events`` (state changes, restarts, reboots).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common.actions.error_classes import ERROR_CLASSES
from scrapefleet.common.browser.profile_names import PROFILE_NAME_SQL
from scrapefleet.common.store import statuses

# The statuses as plain strings, from the store's enums (their one spelling).
JOB_STATUSES = tuple(s.value for s in statuses.JobStatus)
UNFINISHED = tuple(s.value for s in statuses.UNFINISHED)
IN_FLIGHT = tuple(s.value for s in statuses.IN_FLIGHT)
HOST_STATES = tuple(s.value for s in statuses.HostState)

metadata = sa.MetaData()
TS = sa.DateTime(timezone=True)


def _sane_time(table: str, column: str) -> sa.CheckConstraint:
    """Migration 0017: a time a host or job writes is finite and one a datetime holds (a host's
    'infinity' made every tool reading it crash)."""
    return sa.CheckConstraint(
        f"{column} IS NULL"
        f" OR ({column} > '2000-01-01 00:00+00' AND {column} < '3000-01-01 00:00+00')",
        name=f"{table}_{column}_sane",
    )


def _in(column: str, values: Iterable[str]) -> sa.TextClause:
    return sa.text(f"{column} IN {statuses.sql_list(values)}")


jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("status", sa.Text, nullable=False, server_default=statuses.JobStatus.PENDING.value),
    sa.Column("host", sa.Text),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    # Times the job was handed back by a failing host without using an attempt.
    sa.Column("releases", sa.Integer, nullable=False, server_default="0"),
    sa.Column("not_before", TS),
    sa.Column("last_error", sa.Text),
    sa.Column("result", JSONB),
    sa.Column("artifacts", JSONB),
    sa.Column("dedupe_key", sa.Text),
    sa.Column("lock_key", sa.Text),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("queued_at", TS),
    sa.Column("started_at", TS),
    sa.Column("finished_at", TS),
    sa.Column("heartbeat_at", TS),
    # Where the producer POSTs the job's outcome (migration 0002); http(s) only, checked at submit.
    sa.Column("callback_url", sa.Text),
    # From the job's action at submit: only a host whose browser stack takes them runs it.
    sa.Column("needs_browser", sa.Boolean, nullable=False, server_default=sa.false()),
    # The host a job last left (set by the trigger jobs_remember_host when host becomes NULL,
    # migration 0008): the row policy lets that host's role see the job it handed back, and
    # only until another host takes it.
    sa.Column("last_host", sa.Text),
    # Migration 0011: the profiles a job may run under (its browser option ``profile``) and
    # the one the producer chose when it assigned the job (common.browser.profile_names).
    sa.Column("profile_pool", sa.ARRAY(sa.Text)),
    sa.Column("profile", sa.Text),
    # Migration 0012: the job whose completion spawned this one, the steps from its crawl's
    # root (0 for the root) and the crawl (its root job's id; crawl_runs).
    sa.Column("parent_id", sa.BigInteger),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    sa.Column("crawl_id", sa.BigInteger),
    # Migration 0013: what the job loads, for its politeness limits (common.jobs.rate_limits); for
    # the built-in URL actions the trigger jobs_default_rate_key sets the URL's host.
    sa.Column("rate_key", sa.Text),
    # Migration 0010: the class of the last failed attempt (common.actions.error_classes), the times
    # a site blocked the job (handed back without using an attempt, bounded) and the host it
    # was last blocked on (the producer prefers another).
    sa.Column("error_class", sa.Text),
    sa.Column("blocks", sa.Integer, nullable=False, server_default="0"),
    sa.Column("blocked_on_host", sa.Text),
    # Migration 0016: times the job was claimed, ever (the trigger jobs_count_claims counts
    # them and lets nobody take one back): each attempt's token. And an attempt ended here
    # while its host may still run it: its lock key stays held until that host confirms the
    # end or the time passes (docs/attempts-and-locks.md).
    sa.Column("claims", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lingering_host", sa.Text),
    sa.Column("lingering_claim", sa.Integer),
    sa.Column("lingering_until", TS),
    # Of its releases, those its page caused (the browser died under it): only these are
    # bounded (migration 0016).
    sa.Column("page_releases", sa.Integer, nullable=False, server_default="0"),
    # Migration 0024: the claim whose children spawn_children inserted; set, no later claim of
    # the job spawns (a consumer's role cannot write it).
    sa.Column("spawned_claim", sa.Integer),
    # Migration 0027: the host `submit --host` pinned it to; the producer assigns it nowhere
    # else, however often that host hands it back.
    sa.Column("pinned_host", sa.Text),
    sa.CheckConstraint(_in("status", JOB_STATUSES), name="jobs_status_valid"),
    sa.CheckConstraint(_in("error_class", ERROR_CLASSES), name="jobs_error_class_valid"),
    sa.CheckConstraint("max_attempts >= 1", name="jobs_max_attempts_positive"),
    sa.CheckConstraint("attempts >= 0", name="jobs_attempts_not_negative"),
    *(_sane_time("jobs", c) for c in ("not_before", "queued_at", "started_at", "finished_at")),
    _sane_time("jobs", "heartbeat_at"),
    sa.CheckConstraint(
        "artifacts IS NULL OR jsonb_typeof(artifacts) = 'object'", name="jobs_artifacts_object"
    ),
    comment=(
        "One row per job: status, host, attempts (its own failures), releases (attempts its "
        "hosts cut short; `page_releases` of them the page caused, the bounded ones), "
        "`claims` (each attempt's token, never taken back; `lingering_*`: an ended attempt "
        "that may still run on its host), needs_browser, last_error (full traceback), "
        "`error_class` (of its last failed attempt), `blocks` (times a site blocked it) and "
        "`blocked_on_host` (where it was last blocked), result, artifacts"
    ),
)
# The producer's query: pending jobs by priority then age. Partial, so it stays small whatever
# the history.
sa.Index(
    "jobs_pending_idx",
    jobs.c.priority.desc(),
    jobs.c.id,
    postgresql_where=sa.text(f"status = '{statuses.JobStatus.PENDING}'"),
)
# The same, without browser jobs: read when no host's browser stack can take one now.
sa.Index(
    "jobs_pending_no_browser_idx",
    jobs.c.priority.desc(),
    jobs.c.id,
    postgresql_where=sa.text(f"status = '{statuses.JobStatus.PENDING}' AND NOT needs_browser"),
)
# A consumer's claim and the per-host counts: the few jobs in flight, by host.
sa.Index(
    "jobs_in_flight_by_host_idx",
    jobs.c.host,
    jobs.c.status,
    postgresql_where=_in("status", IN_FLIGHT),
)
# No two unfinished jobs share a dedupe key.
sa.Index(
    "jobs_dedupe_key_unfinished_key",
    jobs.c.dedupe_key,
    unique=True,
    postgresql_where=sa.text(f"dedupe_key IS NOT NULL AND {_in('status', UNFINISHED).text}"),
)
# Two jobs with one lock key are never queued or running at once, anywhere in the fleet: the
# planner avoids it, and this index makes it impossible.
sa.Index(
    "jobs_lock_key_in_flight_key",
    jobs.c.lock_key,
    unique=True,
    postgresql_where=sa.text(f"lock_key IS NOT NULL AND {_in('status', IN_FLIGHT).text}"),
)
# Lock keys of jobs whose ended attempt may still run on its host (0016): held as if in flight.
sa.Index(
    "jobs_lingering_lock_key_idx",
    jobs.c.lock_key,
    postgresql_where=sa.text("lock_key IS NOT NULL AND lingering_until IS NOT NULL"),
)
# The same guarantee for a profile: one job of it queued or running at a time (0011).
sa.Index(
    "jobs_profile_in_flight_key",
    jobs.c.profile,
    unique=True,
    postgresql_where=sa.text(f"profile IS NOT NULL AND {_in('status', IN_FLIGHT).text}"),
)
# A crawl's jobs by status (crawls show, the crawls view).
sa.Index(
    "jobs_crawl_idx",
    jobs.c.crawl_id,
    jobs.c.status,
    postgresql_where=sa.text("crawl_id IS NOT NULL"),
)
# Rate limits (0013): a key or kind with budget left is read for that many jobs, in the
# pending order; the trailing minute's attempt starts are counted by start time.
sa.Index(
    "jobs_pending_by_rate_key_idx",
    jobs.c.rate_key,
    jobs.c.priority.desc(),
    jobs.c.id,
    postgresql_where=sa.text(f"status = '{statuses.JobStatus.PENDING}' AND rate_key IS NOT NULL"),
)
sa.Index(
    "jobs_pending_by_kind_idx",
    jobs.c.kind,
    jobs.c.priority.desc(),
    jobs.c.id,
    postgresql_where=sa.text(f"status = '{statuses.JobStatus.PENDING}'"),
)
sa.Index(
    "jobs_started_at_idx", jobs.c.started_at, postgresql_where=sa.text("started_at IS NOT NULL")
)
# Views (recent failures, throughput, completed per host) read by finish time.
sa.Index(
    "jobs_finished_at_idx", jobs.c.finished_at, postgresql_where=sa.text("finished_at IS NOT NULL")
)

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
    # Browser jobs it takes at once now, and why fewer than its capacity (consumer.browser.load).
    sa.Column("browser_limit", sa.Integer),
    sa.Column("browser_limit_reason", sa.Text),
    # The action kinds its consumer runs, kind -> version (common.status.document); NULL: any.
    sa.Column("kinds", JSONB),
    sa.Column("last_seen_at", TS),
    sa.Column("heartbeat_at", TS),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.CheckConstraint(_in("state", HOST_STATES), name="hosts_state_valid"),
    sa.CheckConstraint("capacity BETWEEN 1 AND 64", name="hosts_capacity_range"),
    sa.CheckConstraint(
        "kinds IS NULL OR (jsonb_typeof(kinds) = 'object' AND pg_column_size(kinds) <= 65536)",
        name="hosts_kinds_object",
    ),
    *(
        _sane_time("hosts", c)
        for c in ("state_changed_at", "last_seen_at", "heartbeat_at", "browser_retry_at")
    ),
    comment=(
        "Consumer hosts: capacity, state and why, browser jobs since restart/boot, last "
        "probe, browser state and why"
    ),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("from_status", sa.Text),
    sa.Column("to_status", sa.Text, nullable=False),
    sa.Column("host", sa.Text),
    # The statement's clock, not the transaction's: orders changes made in one transaction.
    sa.Column("at", TS, nullable=False, server_default=sa.text("clock_timestamp()")),
    sa.Column("message", sa.Text),
    # Migration 0010: the class of the failed attempt this change ended
    # (common.actions.error_classes).
    sa.Column("error_class", sa.Text),
    comment=(
        "One row per status change of a job (written by a trigger, so hand-made UPDATEs are "
        "audited too); the row that ends a failed attempt carries its `error_class`"
    ),
)
sa.Index("job_events_job_id_idx", job_events.c.job_id)
# "The last hour / day" of the outcome views (migration 0009): BRIN, since rows arrive in time
# order and a BRIN index costs the inserts almost nothing.
sa.Index("job_events_at_brin", job_events.c.at, postgresql_using="brin")

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
    comment="Host state changes, browser-stack restarts (with duration and memory), reboots",
)
sa.Index("host_events_host_at_idx", host_events.c.host, host_events.c.at)

# ---------------------------------------------------------------- migration 0002: operator

# Finished jobs past retention_days, moved here in small batches by the producer so that the
# hot table (and its indexes) stays the size of the recent past. Same columns as jobs, plus when
# the row moved; no identity (the id is the job's own) and no trigger.
jobs_archive = sa.Table(
    "jobs_archive",
    metadata,
    *(
        sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
        for c in jobs.columns
    ),
    sa.Column("archived_at", TS, nullable=False, server_default=sa.text("now()")),
    comment="Finished jobs past retention, moved out of jobs",
)
sa.Index("jobs_archive_finished_at_idx", jobs_archive.c.finished_at)
# A crawl's archived pages (the crawls view, crawls show).
sa.Index(
    "jobs_archive_crawl_idx",
    jobs_archive.c.crawl_id,
    postgresql_where=sa.text("crawl_id IS NOT NULL"),
)

# One row per (job, final status) whose job has a callback URL, created by the trigger
# jobs_webhook_enqueue, so no code path that finishes a job can forget it. The body is frozen
# when the row is made: what the receiver gets is the event, whatever happens to the job later.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    # NULL once delivered or given up: the due-deliveries index holds only live rows.
    sa.Column("next_attempt_at", TS, server_default=sa.text("now()")),
    sa.Column("delivered_at", TS),
    sa.Column("gave_up_at", TS),
    sa.Column("last_error", sa.Text),
    sa.Column("response_code", sa.Integer),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.UniqueConstraint("job_id", "status", name="webhook_deliveries_job_status_key"),
    comment="Webhook POSTs of finished jobs: one per job and status, with delivery state",
)
sa.Index(
    "webhook_deliveries_due_idx",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=sa.text("next_attempt_at IS NOT NULL"),
)

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
    sa.CheckConstraint("state IN ('ready', 'cooling')", name="profiles_state_valid"),
    sa.CheckConstraint(f"name ~ '{PROFILE_NAME_SQL}'", name="profiles_name_valid"),
    comment=(
        "One row per persistent browser profile: `name`, `host` (bound to it: its user-data-"
        "dir is there), `state` (`ready`, `cooling`), `cooldown_until` (no job before then), "
        "`last_used_at`, `jobs` (assigned under it), `blocks` (its jobs a site blocked), "
        "`created_at`. A consumer's role sees only its own host's rows. The jobs carry "
        "`profile_pool` (what the job named) and `profile` (the one chosen)"
    ),
)
sa.Index("profiles_host_idx", profiles.c.host)

# ---------------------------------------------------------------- migration 0012: crawls

# One row per crawl, keyed by its root job's id: the bounds its spawned jobs respect and how
# many jobs it holds. Written by `scrapefleet crawl` and the function spawn_children.
crawl_runs = sa.Table(
    "crawl_runs",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("seed", sa.Text),
    sa.Column("max_depth", sa.Integer, nullable=False, server_default="5"),
    sa.Column("max_jobs", sa.Integer, nullable=False, server_default="10000"),
    sa.Column("jobs_count", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    # Migration 0017: the kinds its jobs may spawn (NULL: any); spawn_children drops the rest.
    sa.Column("spawn_kinds", sa.ARRAY(sa.Text)),
    sa.CheckConstraint("max_depth >= 0", name="crawl_runs_max_depth_not_negative"),
    sa.CheckConstraint("max_jobs >= 1", name="crawl_runs_max_jobs_positive"),
    comment="A crawl's bounds and job count, one row per crawl (its id is its root job's id)",
)

# Every dedupe key a crawl ever inserted a job for, kept whatever became of the job.
crawl_seen = sa.Table(
    "crawl_seen",
    metadata,
    sa.Column("crawl_id", sa.BigInteger, primary_key=True),
    sa.Column("dedupe_key", sa.Text, primary_key=True),
    # The nearest depth the key was offered at, and the job it became.
    sa.Column("depth", sa.Integer, nullable=False),
    sa.Column("job_id", sa.BigInteger),
    comment="Every dedupe key a crawl ever inserted a job for: never one URL twice",
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

# ---------------------------------------------------------------- migration 0018: schedules

# One row per recurring submission: its cron in a time zone, the validated jobs it submits at
# each slot, and the next slot, which the firing producer moves forward in the same conditional
# UPDATE that claims the slot (common.store.schedules). Written by the CLI and the producer.
schedule_defs = sa.Table(
    "schedule_defs",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    sa.Column("cron", sa.Text),
    sa.Column("every_s", sa.Float),
    sa.Column("timezone", sa.Text, nullable=False, server_default="UTC"),
    sa.Column("jobs", JSONB, nullable=False),
    sa.Column("catch_up", sa.Text, nullable=False, server_default="once"),
    sa.Column("overlap", sa.Text, nullable=False, server_default="allow"),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("next_run_at", TS, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
    sa.CheckConstraint("catch_up IN ('once', 'skip')", name="schedule_defs_catch_up"),
    sa.CheckConstraint("overlap IN ('allow', 'skip')", name="schedule_defs_overlap"),
    sa.CheckConstraint("jsonb_typeof(jobs) = 'array'", name="schedule_defs_jobs_array"),
    # A cron or an interval (anchored at created_at), never both.
    sa.CheckConstraint(
        "(cron IS NULL) <> (every_s IS NULL) AND (every_s IS NULL OR every_s >= 1)",
        name="schedule_defs_cron_or_every",
    ),
    comment="Recurring submissions: a cron in a time zone, the jobs, the next slot",
)

# One row per slot a schedule ran, skipped or was run by hand: the primary key is the database's
# guarantee that a period is fired once, whichever producer fires it.
schedule_runs = sa.Table(
    "schedule_runs",
    metadata,
    sa.Column(
        "schedule_id",
        sa.BigInteger,
        sa.ForeignKey("schedule_defs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("slot", TS, primary_key=True),
    sa.Column("fired_at", TS, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("job_ids", sa.ARRAY(sa.BigInteger), nullable=False, server_default="{}"),
    sa.Column("missed", sa.Integer, nullable=False, server_default="0"),
    sa.Column("fired_by", sa.Text),
    sa.CheckConstraint(
        "outcome IN ('fired', 'manual', 'skipped_missed', 'skipped_overlap')",
        name="schedule_runs_outcome",
    ),
    comment="Each slot of a schedule: fired (its jobs), skipped (why) or run by hand",
)

# ---------------------------------------------------------------- migration 0023: live controls

# One row per rate key, kind or crawl an operator paused or limited live (common.store.controls);
# the producer reads it every cycle. A row that neither pauses nor limits is deleted.
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
