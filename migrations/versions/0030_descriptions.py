"""Every table and view says what it answers in its COMMENT: the schema is its own reference
(``\\d+ name`` in psql), and the documentation's SQL page is generated from these comments
(tools/reference.py), so a view's meaning is written once. A table's is also its ``comment=`` in
its module of common.db (job_tables, host_tables, ...), which the schema test holds to the
migrated database. A migration that recreates a view after this one sets its COMMENT again (a
dropped view loses it; a test finds any relation without one). Downgrade: the comments before.

Revision ID: 0030
Revises: 0027
Create Date: 2026-11-27
"""

from alembic import op

revision = "0030"
down_revision = "0027"
branch_labels = None
depends_on = None

# (kind, relation, comment)
COMMENTS = [
    (
        "TABLE",
        "control_changes",
        (
            "Every live control change: `at`, `changed_by`, `scope`, `name`, `change` (pause, "
            "resume, limit, unlimit), `before`, `after`, `reason`"
        ),
    ),
    (
        "TABLE",
        "crawl_runs",
        "A crawl's bounds and job count, one row per crawl (its id is its root job's id)",
    ),
    (
        "TABLE",
        "crawl_seen",
        "Every dedupe key a crawl ever inserted a job for: never one URL twice",
    ),
    (
        "VIEW",
        "crawls",
        (
            "One row per crawl: `crawl_id` (its root job's id), `seed`, `max_depth`, `max_jobs`, "
            "`jobs` (inserted so far), `done`, `pending` (pending + queued + processing), "
            "`failed`, `cancelled`, `depth_reached` (deepest completed page), `created_at`, "
            "`last_finished_at`; archived jobs included"
        ),
    ),
    (
        "TABLE",
        "db_roles",
        (
            "Which database role is the producer, reporting, or which host's consumer (filled by "
            "`scrapefleet db grant`)"
        ),
    ),
    (
        "VIEW",
        "failure_groups",
        (
            "Failed jobs of 7 days grouped by kind, `error_class` and error (the traceback's last"
            " line with URLs, hex and numbers masked): `jobs`, `last_at`, one `example_job` with "
            "its `example_error`, `first_at`; a status code after `HTTP ` is kept, so 404s and "
            "500s are two groups"
        ),
    ),
    (
        "VIEW",
        "fleet",
        (
            "One row: the producer that cycled last (`leader`, `leader_host`, `leader_pid`, "
            "`version`, `role`), `last_cycle_at`, `producer_up` (false when it stopped, or had no"
            " cycle for max(3 x its `producer_interval_s`, 10 s), or none ever ran), "
            "`standbys_up`, and the pause switch (`assignment_paused`, `pause_changed_by`, "
            "`pause_changed_at`, `pause_reason`, from `fleet_control`)"
        ),
    ),
    (
        "TABLE",
        "host_access",
        (
            "How the producer reaches each host: SSH `address`, `ssh_port`, `ssh_user`, "
            "`ssh_key_file`, `known_hosts_file` (kept out of `hosts`, which a consumer's role "
            "writes)"
        ),
    ),
    (
        "TABLE",
        "host_events",
        "Host state changes, browser-stack restarts (with duration and memory), reboots",
    ),
    (
        "VIEW",
        "host_load",
        (
            "Per host: state, running, queued, completed in the last hour, probe failures, "
            "`browser` (idle, starting, ready, failing, absent) with `browser_reason` and "
            "`browser_retry_at`, `browser_limit` (browser jobs it takes at once now) with "
            "`browser_limit_reason` (why fewer than capacity)"
        ),
    ),
    (
        "VIEW",
        "host_outcomes",
        (
            "Per host, attempts ended in the last hour and day by outcome: `completed_*`, "
            "`failed_*` (the job's own failure), `released_*` (the host's stack or a crash cut it"
            " short), `rescued_*` (the host went silent); `failure_rate_1d` = failed / (completed"
            " + failed). From `job_events`, so a host's history survives its jobs moving on"
        ),
    ),
    (
        "TABLE",
        "hosts",
        (
            "Consumer hosts: capacity, state and why, browser jobs since restart/boot, last "
            "probe, browser state and why"
        ),
    ),
    (
        "TABLE",
        "job_events",
        (
            "One row per status change of a job (written by a trigger, so hand-made UPDATEs are "
            "audited too); the row that ends a failed attempt carries its `error_class`"
        ),
    ),
    (
        "TABLE",
        "jobs",
        (
            "One row per job: status, host, attempts (its own failures), releases (attempts its "
            "hosts cut short; `page_releases` of them the page caused, the bounded ones), "
            "`claims` (each attempt's token, never taken back; `lingering_*`: an ended attempt "
            "that may still run on its host), needs_browser, last_error (full traceback), "
            "`error_class` (of its last failed attempt), "
            "`blocks` (times a site blocked it) and `blocked_on_host` (where it was last "
            "blocked), result, artifacts"
        ),
    ),
    (
        "VIEW",
        "kind_outcomes",
        ("Per kind, attempts ended in the last hour and day by outcome, as host_outcomes per host"),
    ),
    (
        "TABLE",
        "live_controls",
        (
            "What an operator holds live: one row per rate key, kind or crawl (`scope`, `name`) "
            "`paused` or limited (`concurrency`, `per_minute`), with `changed_by`, `changed_at`, "
            "`reason`"
        ),
    ),
    (
        "TABLE",
        "producers",
        (
            "One row per producer process (name `host:pid`): role (`leader`, `standby`, "
            "`stopped`), version, its `interval_s`, `last_seen_at`, and for the leader "
            "`last_cycle_at` and `last_cycle_duration_s` (stamped in every full cycle's own "
            "transaction; a standby stamps `last_seen_at` at each try for the lock); rows unseen "
            "for 7 days are deleted when a producer starts"
        ),
    ),
    (
        "TABLE",
        "profiles",
        (
            "One row per persistent browser profile: `name`, `host` (bound to it: its user-data-"
            "dir is there), `state` (`ready`, `cooling`), `cooldown_until` (no job before then), "
            "`last_used_at`, `jobs` (assigned under it), `blocks` (its jobs a site blocked), "
            "`created_at`. A consumer's role sees only its own host's rows. The jobs carry "
            "`profile_pool` (what the job named) and `profile` (the one chosen)"
        ),
    ),
    (
        "VIEW",
        "progress",
        (
            "One row: `remaining` (pending + queued + processing, each also), `waiting_retry` "
            "(pending with a `not_before` to come), `completed_per_min_5m`, "
            "`completed_per_min_60m`, `eta` (what is left at the 5-minute rate; NULL when nothing"
            " completed in the last 5 minutes: stalled), `oldest_pending_age` (of a pending job "
            "due now), `last_completed_at` (within the hour)"
        ),
    ),
    (
        "TABLE",
        "rate_keys",
        (
            "What the producer writes for that view: a row per named key and the default's (`*`),"
            " a row per key slowed down (`factor`, `paused_until`); no consumer role has a grant "
            "on it"
        ),
    ),
    (
        "VIEW",
        "rate_limits",
        (
            "One row per rate key with work in flight, started in the last minute, pending, or "
            "slowed down: `in_flight`, `started_last_minute`, `pending`, `concurrency_limit` and "
            "`per_minute_limit` (its own or the default, as the leader applies them), `factor` "
            "and `paused_until` (its back-off)"
        ),
    ),
    (
        "VIEW",
        "recent_failures",
        (
            "Failed jobs of the last 7 days, newest first, with the error line, artifact paths "
            "(`network_log` too) and `error_class`"
        ),
    ),
    (
        "VIEW",
        "schedules",
        (
            "One row per schedule: cron, zone, paused, `next_run_at`, its last run (`last_slot`, "
            "`last_fired_at`, `last_lag_s`, `last_outcome`) and how that run's jobs ended "
            "(`last_completed`, `last_failed`, `last_unfinished`); `schedule_defs` and "
            "`schedule_runs` (one row per slot fired, skipped or run by hand) under it"
        ),
    ),
    (
        "VIEW",
        "sick_hosts",
        (
            "Every host, the sickest first: `state`, `why` (one line: offline since when, probes "
            "failing, jobs rescued in a day, failure rate; NULL when healthy), the day's "
            "`rescued_1d`, `released_1d`, `failed_1d`, `completed_1d`, `failure_rate_1d`, "
            "`probe_failures`, `last_seen_at`"
        ),
    ),
    (
        "VIEW",
        "throughput_per_hour",
        (
            "Completed and failed jobs per hour over 7 days, a row for every hour (zero when "
            "nothing finished)"
        ),
    ),
]
PREVIOUS = [
    (
        "TABLE",
        "control_changes",
        "Every live control change: who, when, what, before and after, why",
    ),
    (
        "TABLE",
        "crawl_runs",
        "One row per crawl (id = its root job's id): bounds and jobs so far",
    ),
    (
        "TABLE",
        "crawl_seen",
        "Every dedupe key a crawl has inserted a job for: never one URL twice",
    ),
    ("VIEW", "crawls", None),
    (
        "TABLE",
        "db_roles",
        "Database roles by duty (scrapefleet db grant): whom the row policies let see what",
    ),
    (
        "VIEW",
        "failure_groups",
        "Failed jobs of 7 days grouped by kind, error class and masked error",
    ),
    (
        "VIEW",
        "fleet",
        "The leading producer, whether it is up, the pause switch",
    ),
    (
        "TABLE",
        "host_access",
        "How the producer reaches each host (SSH); no consumer role may write it",
    ),
    (
        "TABLE",
        "host_events",
        "Host state changes, restarts, reboots",
    ),
    (
        "VIEW",
        "host_load",
        "Per host: state, running, queued, done last hour",
    ),
    (
        "VIEW",
        "host_outcomes",
        "Per host, attempts ended in the last hour and day, by outcome",
    ),
    (
        "TABLE",
        "hosts",
        "Consumer hosts: capacity, state, counters, probe",
    ),
    (
        "TABLE",
        "job_events",
        "One row per job status change (by trigger)",
    ),
    (
        "TABLE",
        "jobs",
        "One row per job; status is its place in the flow",
    ),
    (
        "VIEW",
        "kind_outcomes",
        "Per kind, attempts ended in the last hour and day, by outcome",
    ),
    (
        "TABLE",
        "live_controls",
        (
            "Rate keys, kinds and crawls an operator paused or limited live (the producer reads "
            "it every cycle)"
        ),
    ),
    (
        "TABLE",
        "producers",
        "One row per producer process: role, version, last cycle (leader), last seen",
    ),
    (
        "TABLE",
        "profiles",
        "Persistent browser profiles: bound host, state, cool-down, use (the operator's view)",
    ),
    (
        "VIEW",
        "progress",
        "One row: jobs left, completions per minute (5 and 60 min), ETA, oldest pending",
    ),
    (
        "TABLE",
        "rate_keys",
        "Rate keys the producer slows down or has limits for (the row * : the default)",
    ),
    ("VIEW", "rate_limits", None),
    (
        "VIEW",
        "recent_failures",
        "Failed jobs of the last 7 days, newest first",
    ),
    ("VIEW", "schedules", None),
    (
        "VIEW",
        "sick_hosts",
        "Every host, the sickest first (offline, probes failing, rescues, failures)",
    ),
    (
        "VIEW",
        "throughput_per_hour",
        "Completed and failed jobs per hour, 7 days",
    ),
]


def _comment(kind: str, name: str, text: str | None) -> None:
    value = "NULL" if text is None else "'" + text.replace("'", "''") + "'"
    op.execute(f"COMMENT ON {kind} {name} IS {value}")


def upgrade() -> None:
    for kind, name, text in COMMENTS:
        _comment(kind, name, text)


def downgrade() -> None:
    for kind, name, text in PREVIOUS:
        _comment(kind, name, text)
