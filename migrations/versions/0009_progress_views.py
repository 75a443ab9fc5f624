"""The 7am questions as views: how far along and when done (``progress``), which host or kind
is sick (``host_outcomes``, ``kind_outcomes``), what fails and why (``failure_groups``).

The outcomes come from ``job_events``: each attempt's end is a row there with the host that ran
it, so a host's history survives its jobs moving on (``jobs.host`` keeps only the last host).
An attempt ended:
- completed: processing -> completed;
- rescued: its host went silent (message "rescued: ..."); released: the host's stack or a
  crash cut it short ("released..." or "interrupted: ..."): neither is the job's failure;
- stopped: an operator stopped it (processing -> cancelled);
- failed: any other processing -> pending (to be retried) or failed.
A BRIN index on ``job_events.at`` keeps "the last day" a small read whatever the history
(the table is append-only in time order, which is what BRIN is for; it costs the inserts
almost nothing).

``recent_failures`` gains ``network_log``: the failed attempt's network log (every request of
the page, ``attempt-N.network.json``), beside its screenshot and HTML.

Failures are grouped by kind and by the last line of their error with URLs, hex and numbers
masked, so "timed out fetching https://a/1" and ".../2" are one group.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# One attempt's end, classified (see the docstring).
OUTCOME = """
CASE
    WHEN e.to_status = 'completed' THEN 'completed'
    WHEN e.message LIKE 'rescued:%' THEN 'rescued'
    WHEN e.message LIKE 'released%' OR e.message LIKE 'interrupted:%' THEN 'released'
    WHEN e.to_status = 'cancelled' THEN 'stopped'
    ELSE 'failed'
END"""
ENDED = "e.from_status = 'processing' AND e.at > now() - interval '1 day'"


def _counts(window: str, suffix: str) -> str:
    recent = f"e.at > now() - interval '{window}'"
    outcome = OUTCOME.strip()
    return ",\n    ".join(
        f"count(*) FILTER (WHERE {recent} AND {outcome} = '{name}') AS {name}_{suffix}"
        for name in ("completed", "failed", "released", "rescued")
    )


# Of the attempts that ended by the job's own doing in the last day, the share that failed.
FAILURE_RATE = (
    "round(count(*) FILTER (WHERE {o} = 'failed')::numeric"
    " / nullif(count(*) FILTER (WHERE {o} IN ('completed', 'failed')), 0), 3) AS failure_rate_1d"
)


def _outcomes_view(name: str, key: str, source: str) -> str:
    """A view of the attempts ended in the last hour and day, by outcome, per ``key``."""
    return f"""
CREATE VIEW {name} AS
SELECT {key},
    {_counts("1 hour", "1h")},
    {_counts("1 day", "1d")},
    {FAILURE_RATE.format(o=OUTCOME.strip())}
FROM {source}
WHERE {ENDED}
GROUP BY {key}
"""


HOST_OUTCOMES = _outcomes_view("host_outcomes", "e.host", "job_events e")
KIND_OUTCOMES = _outcomes_view(
    "kind_outcomes",
    "j.kind",
    "job_events e JOIN (SELECT id, kind FROM jobs UNION ALL SELECT id, kind FROM jobs_archive)"
    " AS j ON j.id = e.job_id",
)

# The error's last non-blank line (a traceback's says what went wrong), then masked.
LAST_LINE = r"coalesce((regexp_match(j.last_error, '([^\n]*\S[^\n]*)\s*$'))[1], '(no error)')"
MASKED = (
    "regexp_replace(regexp_replace(regexp_replace("
    f"{LAST_LINE}, "
    r"'[a-z][a-z0-9+.-]*://[^\s''\"<>)]+', '<url>', 'gi'), "
    r"'\m0x[0-9a-f]+\M|\m[0-9a-f]{12,}\M', '<hex>', 'gi'), "
    r"'\d+(\.\d+)?', '<n>', 'g')"
)

FAILURE_GROUPS = f"""
CREATE VIEW failure_groups AS
SELECT j.kind, {MASKED} AS error, count(*) AS jobs,
       max(j.finished_at) AS last_at,
       (array_agg(j.id ORDER BY j.finished_at DESC))[1] AS example_job,
       (array_agg({LAST_LINE} ORDER BY j.finished_at DESC))[1] AS example_error
FROM jobs j
WHERE j.status = 'failed' AND j.finished_at > now() - interval '7 days'
GROUP BY j.kind, {MASKED}
ORDER BY count(*) DESC
"""

# Completions per minute over the last 5 and 60 minutes; the ETA divides what is left by the
# 5-minute rate (the 60-minute one when nothing finished in the last 5).
PROGRESS = """
CREATE VIEW progress AS
WITH counts AS (
    SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
           count(*) FILTER (WHERE status = 'pending' AND not_before > now()) AS waiting_retry,
           count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'processing') AS processing
    FROM jobs WHERE status IN ('pending', 'queued', 'processing')
), done AS (
    SELECT count(*) FILTER (WHERE finished_at > now() - interval '5 minutes') AS last_5m,
           count(*) AS last_60m
    FROM jobs WHERE status = 'completed' AND finished_at > now() - interval '60 minutes'
), oldest AS (
    SELECT min(created_at) AS created_at FROM jobs
    WHERE status = 'pending' AND (not_before IS NULL OR not_before <= now())
)
SELECT c.pending + c.queued + c.processing AS remaining,
       c.pending, c.queued, c.processing, c.waiting_retry,
       round(d.last_5m / 5.0, 1) AS completed_per_min_5m,
       round(d.last_60m / 60.0, 1) AS completed_per_min_60m,
       CASE
           WHEN c.pending + c.queued + c.processing = 0 THEN interval '0'
           WHEN d.last_5m > 0 THEN make_interval(
               secs => (c.pending + c.queued + c.processing) * 300.0 / d.last_5m)
           WHEN d.last_60m > 0 THEN make_interval(
               secs => (c.pending + c.queued + c.processing) * 3600.0 / d.last_60m)
       END AS eta,
       now() - o.created_at AS oldest_pending_age
FROM counts c, done d, oldest o
"""

# 0001's body, with the network log appended (CREATE OR REPLACE VIEW may only append columns).
RECENT_FAILURES = r"""
        SELECT id AS job_id, kind, host, attempts, max_attempts, finished_at,
               (regexp_match(last_error, '([^\n]+)\s*$'))[1] AS error,
               artifacts ->> 'screenshot' AS screenshot,
               artifacts ->> 'html' AS html,
               artifacts ->> 'traceback' AS traceback_file{network}
        FROM jobs
        WHERE status = 'failed' AND finished_at > now() - interval '7 days'
        ORDER BY finished_at DESC
"""

COMMENTS = {
    "progress": "One row: jobs left, completions per minute (5 and 60 min), ETA, oldest pending",
    "host_outcomes": "Per host, attempts ended in the last hour and day, by outcome",
    "kind_outcomes": "Per kind, attempts ended in the last hour and day, by outcome",
    "failure_groups": "Failed jobs of 7 days grouped by kind and masked error, with an example",
}


def upgrade() -> None:
    op.execute("CREATE INDEX job_events_at_brin ON job_events USING brin (at)")
    for view in (PROGRESS, HOST_OUTCOMES, KIND_OUTCOMES, FAILURE_GROUPS):
        op.execute(view)
    for name, comment in COMMENTS.items():
        op.execute(f"COMMENT ON VIEW {name} IS '{comment}'")
    network = ",\n               artifacts ->> 'network' AS network_log"
    op.execute(
        "CREATE OR REPLACE VIEW recent_failures AS" + RECENT_FAILURES.format(network=network)
    )


def downgrade() -> None:
    op.execute("DROP VIEW recent_failures")  # a column cannot be dropped by REPLACE
    op.execute("CREATE VIEW recent_failures AS" + RECENT_FAILURES.format(network=""))
    op.execute("COMMENT ON VIEW recent_failures IS 'Failed jobs of the last 7 days, newest first'")
    for name in COMMENTS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute("DROP INDEX IF EXISTS job_events_at_brin")
