"""Numbers that never lie: ``progress`` says nothing of an ETA while nothing finishes,
``throughput_per_hour`` shows empty hours, ``failure_groups`` keeps status codes apart.

- ``progress.eta`` is NULL when no job completed in the last 5 minutes while work remains: a
  fallback to the hour's rate would show a fleet that has stopped an ETA of minutes, growing
  at every look. ``last_completed_at`` (appended) says when the last job of the last hour
  completed, so a reader can say "stalled since". Whether the producer is up is judged in
  Python (common.reads.producer_status), where its staleness rule lives.
- ``throughput_per_hour`` has a row for every hour of the 7 days, zero when nothing finished,
  so a gap reads as a gap and not as a missing row.
- ``failure_groups`` masks numbers except a status code after "HTTP " or "status ", so 404s
  and 500s are two groups; ``first_at`` (appended) says when the group's first failure was.
- ``sick_hosts`` (new) answers "which host is sick?": every host, the sickest first, with one
  line saying why. A host that is offline (or whose probes fail) comes first, then one whose
  jobs were rescued (its consumer went silent while running them), then by failure rate. A dead
  host has no recent outcomes at all, so sorting ``host_outcomes`` by failure rate put it last.

Revision ID: 0022
Revises: 0018
Create Date: 2026-11-26
"""

import importlib

from alembic import op

revision = "0022"
down_revision = "0018"
branch_labels = None
depends_on = None

_INITIAL = importlib.import_module("scrapefleet.migrations.versions.0001_initial")
_PROGRESS_VIEWS = importlib.import_module("scrapefleet.migrations.versions.0009_progress_views")
_ERROR_CLASSES = importlib.import_module("scrapefleet.migrations.versions.0010_error_classes")
LAST_LINE = _PROGRESS_VIEWS.LAST_LINE

PROGRESS = """
CREATE OR REPLACE VIEW progress AS
WITH counts AS (
    SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
           count(*) FILTER (WHERE status = 'pending' AND not_before > now()) AS waiting_retry,
           count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'processing') AS processing
    FROM jobs WHERE status IN ('pending', 'queued', 'processing')
), done AS (
    SELECT count(*) FILTER (WHERE finished_at > now() - interval '5 minutes') AS last_5m,
           count(*) AS last_60m,
           max(finished_at) AS last_completed_at
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
       END AS eta,
       now() - o.created_at AS oldest_pending_age,
       d.last_completed_at
FROM counts c, done d, oldest o
"""

THROUGHPUT_PER_HOUR = """
CREATE OR REPLACE VIEW throughput_per_hour AS
WITH finished AS (
    SELECT date_trunc('hour', finished_at) AS hour,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM jobs
    WHERE finished_at > now() - interval '7 days'
    GROUP BY 1
)
SELECT h.hour, coalesce(f.completed, 0) AS completed, coalesce(f.failed, 0) AS failed
FROM generate_series(date_trunc('hour', now() - interval '7 days') + interval '1 hour',
                     date_trunc('hour', now()), interval '1 hour') AS h(hour)
LEFT JOIN finished f USING (hour)
ORDER BY 1 DESC
"""

# 0009's masking, but a number right after "HTTP " or "status " is a status code and stays,
# and a number is masked whole (never from its middle digit on).
MASKED = (
    "regexp_replace(regexp_replace(regexp_replace("
    f"{LAST_LINE}, "
    r"'[a-z][a-z0-9+.-]*://[^\s''\"<>)]+', '<url>', 'gi'), "
    r"'\m0x[0-9a-f]+\M|\m[0-9a-f]{12,}\M', '<hex>', 'gi'), "
    r"'(?<![0-9])(?<!HTTP )(?<!status )\d+(\.\d+)?', '<n>', 'g')"
)

FAILURE_GROUPS = f"""
CREATE OR REPLACE VIEW failure_groups AS
SELECT j.kind, j.error_class, {MASKED} AS error, count(*) AS jobs,
       max(j.finished_at) AS last_at,
       (array_agg(j.id ORDER BY j.finished_at DESC))[1] AS example_job,
       (array_agg({LAST_LINE} ORDER BY j.finished_at DESC))[1] AS example_error,
       min(j.finished_at) AS first_at
FROM jobs j
WHERE j.status = 'failed' AND j.finished_at > now() - interval '7 days'
GROUP BY j.kind, j.error_class, {MASKED}
ORDER BY count(*) DESC
"""

SICK_HOSTS = """
CREATE VIEW sick_hosts AS
WITH h AS (
    SELECT h.name AS host, h.state, h.state_reason, h.state_changed_at, h.probe_failures,
           h.last_probe_error, h.last_seen_at,
           coalesce(o.rescued_1d, 0) AS rescued_1d, coalesce(o.released_1d, 0) AS released_1d,
           coalesce(o.failed_1d, 0) AS failed_1d, coalesce(o.completed_1d, 0) AS completed_1d,
           o.failure_rate_1d
    FROM hosts h LEFT JOIN host_outcomes o ON o.host = h.name
)
SELECT host, state,
       CASE
           WHEN state = 'offline' THEN
               'offline since ' || to_char(state_changed_at, 'YYYY-MM-DD HH24:MI:SS TZ')
               || coalesce(': ' || state_reason, '')
           WHEN probe_failures > 0 THEN
               probe_failures || ' probe(s) failed: ' || coalesce(last_probe_error, '?')
           WHEN rescued_1d > 0 THEN
               rescued_1d || ' job(s) rescued in a day (its consumer went silent running them)'
           WHEN failure_rate_1d >= 0.5 THEN
               round(failure_rate_1d * 100) || '% of its attempts failed in a day'
       END AS why,
       rescued_1d, released_1d, failed_1d, completed_1d, failure_rate_1d,
       probe_failures, last_seen_at
FROM h
ORDER BY CASE
             WHEN state = 'offline' THEN 0
             WHEN probe_failures > 0 THEN 1
             WHEN rescued_1d > 0 THEN 2
             ELSE 3
         END,
         rescued_1d DESC, failure_rate_1d DESC NULLS LAST, host
"""
SICK_HOSTS_COMMENT = "Every host, the sickest first (offline, probes failing, rescues, failures)"


def upgrade() -> None:
    op.execute(PROGRESS)
    op.execute(THROUGHPUT_PER_HOUR)
    op.execute(FAILURE_GROUPS)
    op.execute(SICK_HOSTS)
    op.execute(f"COMMENT ON VIEW sick_hosts IS '{SICK_HOSTS_COMMENT}'")


def downgrade() -> None:
    op.execute("DROP VIEW sick_hosts")
    # Appended columns cannot be dropped by REPLACE: drop and create the earlier views.
    op.execute("DROP VIEW progress")
    op.execute(_PROGRESS_VIEWS.PROGRESS)
    op.execute(f"COMMENT ON VIEW progress IS '{_PROGRESS_VIEWS.COMMENTS['progress']}'")
    op.execute("DROP VIEW failure_groups")
    op.execute(_ERROR_CLASSES.FAILURE_GROUPS)
    op.execute(f"COMMENT ON VIEW failure_groups IS '{_ERROR_CLASSES.GROUPS_COMMENT}'")
    op.execute(
        "CREATE OR REPLACE VIEW throughput_per_hour AS" + _INITIAL.VIEWS["throughput_per_hour"]
    )
