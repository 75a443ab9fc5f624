"""The jobs' tables: ``jobs`` and its indexes, ``job_events`` (one row per status change,
written by a trigger so that even a hand-written UPDATE is audited), ``jobs_archive`` (finished
jobs past retention) and ``webhook_deliveries`` (each finished job's POST).

Tables are a user interface (ops read them at a psql prompt), so names say what they hold.
Alembic migrations create them; tests/integration/test_schema.py checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from scrapefleet.common import constants as C
from scrapefleet.common.actions.error_classes import ERROR_CLASSES
from scrapefleet.common.db.schema_base import (
    IN_FLIGHT,
    JOB_STATUSES,
    TS,
    UNFINISHED,
    column_in,
    metadata,
    sane_time,
)
from scrapefleet.common.store import statuses

TRACEPARENT_PATTERN = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
TRACEPARENT_DEFAULT = (
    "'00-' || replace(gen_random_uuid()::text, '-', '') || '-'"
    " || left(replace(gen_random_uuid()::text, '-', ''), 16) || '-01'"
)

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
    # Migration 0032: the proxy pool the job asked for (common.identities.proxy_pools) and the
    # proxy the producer leased to its current or last attempt.
    sa.Column("proxy_pool", sa.Text),
    sa.Column("proxy_id", sa.BigInteger),
    sa.Column("proxy_session", sa.Text),  # a sticky session's key (proxy_sessions)
    # Migration 0037: the job's W3C trace context (common.tracing), random unless the submitter
    # gave one, and for a spawned job its parent's (set by the trigger jobs_trace_link).
    sa.Column("traceparent", sa.Text, server_default=sa.text(TRACEPARENT_DEFAULT)),
    sa.Column("trace_link", sa.Text),
    *(
        sa.CheckConstraint(f"{c} IS NULL OR {c} ~ '{TRACEPARENT_PATTERN}'", name=f"jobs_{c}_shape")
        for c in ("traceparent", "trace_link")
    ),
    # Migration 0031: the kinds its action declares it spawns besides its own (registry's
    # ``spawns``, set at submit, passed on to its children); spawn_children inserts no other.
    sa.Column("spawn_kinds", sa.ARRAY(sa.Text)),
    sa.CheckConstraint(column_in("status", JOB_STATUSES), name="jobs_status_valid"),
    sa.CheckConstraint(column_in("error_class", ERROR_CLASSES), name="jobs_error_class_valid"),
    sa.CheckConstraint("max_attempts >= 1", name="jobs_max_attempts_positive"),
    sa.CheckConstraint("attempts >= 0", name="jobs_attempts_not_negative"),
    *(sane_time("jobs", c) for c in ("not_before", "queued_at", "started_at", "finished_at")),
    sane_time("jobs", "heartbeat_at"),
    sane_time("jobs", "lingering_until"),  # migration 0031
    sa.CheckConstraint(
        "artifacts IS NULL OR jsonb_typeof(artifacts) = 'object'", name="jobs_artifacts_object"
    ),
    # Migration 0031: what a host writes, bounded (common.constants).
    sa.CheckConstraint(
        f"result IS NULL OR octet_length(result::text) <= {C.RESULT_MAX_BYTES_LIMIT}",
        name="jobs_result_size",
    ),
    sa.CheckConstraint(
        f"last_error IS NULL OR char_length(last_error) <= {C.LAST_ERROR_MAX_CHARS}",
        name="jobs_last_error_size",
    ),
    sa.CheckConstraint(
        f"artifacts IS NULL OR octet_length(artifacts::text) <= {C.ARTIFACTS_MAX_BYTES}",
        name="jobs_artifacts_size",
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
    postgresql_where=column_in("status", IN_FLIGHT),
)
# No two unfinished jobs share a dedupe key.
sa.Index(
    "jobs_dedupe_key_unfinished_key",
    jobs.c.dedupe_key,
    unique=True,
    postgresql_where=sa.text(f"dedupe_key IS NOT NULL AND {column_in('status', UNFINISHED).text}"),
)
# Two jobs with one lock key are never queued or running at once, anywhere in the fleet: the
# planner avoids it, and this index makes it impossible.
sa.Index(
    "jobs_lock_key_in_flight_key",
    jobs.c.lock_key,
    unique=True,
    postgresql_where=sa.text(f"lock_key IS NOT NULL AND {column_in('status', IN_FLIGHT).text}"),
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
    postgresql_where=sa.text(f"profile IS NOT NULL AND {column_in('status', IN_FLIGHT).text}"),
)
# The jobs holding each proxy now: its per-proxy cap is counted here (0032).
sa.Index(
    "jobs_proxy_in_flight_idx",
    jobs.c.proxy_id,
    postgresql_where=sa.text(f"proxy_id IS NOT NULL AND {column_in('status', IN_FLIGHT).text}"),
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
    # Generated from the payload: the sender takes due rows while their sizes fit its budget.
    sa.Column(
        "payload_bytes",
        sa.Integer,
        sa.Computed("octet_length(CAST(payload AS text))", persisted=True),
        comment="Bytes of the payload as JSON text: what the sender holds to POST it.",
    ),
    sa.UniqueConstraint("job_id", "status", name="webhook_deliveries_job_status_key"),
    comment="Webhook POSTs of finished jobs: one per job and status, with delivery state",
)
sa.Index(
    "webhook_deliveries_due_idx",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=sa.text("next_attempt_at IS NOT NULL"),
)
