"""An ETA from what can actually run, and hosts that say what they run.

- ``progress.eta`` is NULL, and ``no_eta_reason`` (appended) says why, whenever the work cannot
  finish at the fleet's pace: the producer is down (the ``fleet`` view's rule), assignment is
  paused, no host is active, or pending jobs wait on something only an operator or a host can
  change: a rate key, kind or crawl an operator paused, or a kind no active host runs
  (``held``, appended: how many pending jobs; the reason names the largest groups). Before, a
  paused key or a dead producer still showed an ETA of minutes.
- Otherwise the ETA is what is left at the 5-minute rate, but never less than each key's pending
  jobs at its per-minute limit (scaled by its back-off factor, after its Retry-After pause) nor
  each kind's at an operator's live per-minute limit: 258 jobs on a key limited to 30 a minute
  take at least 8.6 minutes however fast the other keys go.
- ``host_load`` shows ``kinds`` (the kinds the host's consumer runs, sorted; NULL: not
  reported, runs any kind) and ``not_taking_reason`` (why it takes no new job now: its state
  and that state's reason, or full), so the host side of a waiting kind is one read away.

Revision ID: 0036
Revises: 0030
Create Date: 2026-11-28
"""

import importlib

from alembic import op

revision = "0036"
down_revision = "0030"
branch_labels = None
depends_on = None

_HONEST = importlib.import_module("scrapefleet.migrations.versions.0022_honest_numbers")
_BROWSER = importlib.import_module("scrapefleet.migrations.versions.0005_browser_capability")
_BROWSER_LIMIT = importlib.import_module("scrapefleet.migrations.versions.0015_browser_limit")
_DESCRIPTIONS = importlib.import_module("scrapefleet.migrations.versions.0030_descriptions")

# Reasons named in no_eta_reason; more are "and N more".
NAMED_REASONS = 3

PROGRESS = f"""
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
), fleet_now AS (
    SELECT f.producer_up, f.assignment_paused,
           EXISTS (SELECT 1 FROM hosts WHERE state = 'active') AS any_active,
           EXISTS (SELECT 1 FROM hosts WHERE kinds IS NOT NULL) AS kinds_reported
    FROM fleet f
), groups AS (
    -- Pending work by what can hold it: a handful of rows per kind and site.
    SELECT kind, rate_key, crawl_id, count(*) AS jobs
    FROM jobs WHERE status = 'pending'
    GROUP BY kind, rate_key, crawl_id
), held AS (
    -- What keeps each group from running until an operator or a host acts (the order is the
    -- producer's: common.store.assignment leaves these out of every pending read).
    SELECT g.jobs,
           CASE
               WHEN EXISTS (SELECT 1 FROM live_controls l WHERE l.scope = 'rate_key'
                            AND l.paused AND l.name = g.rate_key)
                   THEN format('of rate key %L paused by an operator', g.rate_key)
               WHEN EXISTS (SELECT 1 FROM live_controls l WHERE l.scope = 'kind'
                            AND l.paused AND l.name = g.kind)
                   THEN format('of kind %L paused by an operator', g.kind)
               WHEN EXISTS (SELECT 1 FROM live_controls l WHERE l.scope = 'crawl'
                            AND l.paused AND l.name = CAST(g.crawl_id AS text))
                   THEN format('of crawl %s paused by an operator', g.crawl_id)
               WHEN fn.kinds_reported AND NOT EXISTS (
                   SELECT 1 FROM hosts h WHERE h.state = 'active'
                   AND (h.kinds IS NULL OR jsonb_exists(h.kinds, g.kind)))
                   THEN format('of kind %L: no active host runs it', g.kind)
           END AS why
    FROM groups g, fleet_now fn
), held_total AS (
    SELECT coalesce(sum(jobs), 0) AS held,
           array_agg(jobs || ' job(s) ' || why ORDER BY jobs DESC, why) AS reasons
    FROM (SELECT sum(jobs) AS jobs, why FROM held WHERE why IS NOT NULL GROUP BY why) AS r
), floors AS (
    -- The least time each limited key needs for its pending jobs (after its pause, if any).
    SELECT max(coalesce(extract(epoch FROM r.paused_until - now()), 0)
               + coalesce(60.0 * r.pending / (r.per_minute_limit * r.factor), 0)) AS key_s
    FROM rate_limits r
    WHERE r.pending > 0 AND (r.per_minute_limit IS NOT NULL OR r.paused_until IS NOT NULL)
), kind_floors AS (
    SELECT max(60.0 * g.jobs / l.per_minute) AS kind_s
    FROM (SELECT kind, sum(jobs) AS jobs FROM groups GROUP BY kind) AS g
    JOIN live_controls l ON l.scope = 'kind' AND l.name = g.kind AND l.per_minute IS NOT NULL
), verdict AS (
    SELECT c.pending + c.queued + c.processing AS remaining,
           CASE
               WHEN c.pending + c.queued + c.processing = 0 THEN NULL
               WHEN NOT fn.producer_up THEN 'the producer is down, nothing is assigned'
               WHEN fn.assignment_paused THEN 'assignment is paused by an operator'
               WHEN NOT fn.any_active THEN 'no host is active, nothing is taken'
               WHEN ht.held > 0 THEN array_to_string(ht.reasons[1:{NAMED_REASONS}], '; ')
                   || CASE WHEN cardinality(ht.reasons) > {NAMED_REASONS}
                      THEN format('; and %s more', cardinality(ht.reasons) - {NAMED_REASONS})
                      ELSE '' END
               WHEN d.last_5m = 0 THEN 'nothing completed in the last 5 min'
           END AS reason
    FROM counts c, done d, fleet_now fn, held_total ht
)
SELECT v.remaining,
       c.pending, c.queued, c.processing, c.waiting_retry,
       round(d.last_5m / 5.0, 1) AS completed_per_min_5m,
       round(d.last_60m / 60.0, 1) AS completed_per_min_60m,
       CASE
           WHEN v.remaining = 0 THEN interval '0'
           WHEN v.reason IS NULL THEN make_interval(secs => greatest(
               v.remaining * 300.0 / d.last_5m, fl.key_s, kf.kind_s))
       END AS eta,
       now() - o.created_at AS oldest_pending_age,
       d.last_completed_at,
       ht.held,
       v.reason AS no_eta_reason
FROM counts c, done d, oldest o, verdict v, held_total ht, floors fl, kind_floors kf
"""

HOST_LOAD_0015 = _BROWSER_LIMIT.HOST_LOAD_0005 + ", h.browser_limit, h.browser_limit_reason"
HOST_LOAD = (
    "CREATE OR REPLACE VIEW host_load AS"
    + HOST_LOAD_0015
    + """,
               (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(h.kinds) AS k) AS kinds,
               CASE
                   WHEN h.state <> 'active' THEN h.state || coalesce(': ' || h.state_reason, '')
                   WHEN count(j.id) >= h.capacity THEN 'full'
               END AS not_taking_reason"""
    + _BROWSER.HOST_LOAD_FROM
)

PROGRESS_COMMENT = (
    "One row: `remaining` (pending + queued + processing, each also), `waiting_retry` "
    "(pending with a `not_before` to come), `completed_per_min_5m`, `completed_per_min_60m`, "
    "`eta` (what is left at the 5-minute rate, never less than a limited key's pending jobs at "
    "its per-minute limit; NULL when the work cannot finish at that pace, and "
    "`no_eta_reason` says why: the producer down, assignment paused, no active host, nothing "
    "completed in 5 minutes, or `held` pending jobs of a key, kind or crawl an operator paused "
    "or of a kind no active host runs), `oldest_pending_age` (of a pending job due now), "
    "`last_completed_at` (within the hour)"
)
HOST_LOAD_COMMENT = (
    "Per host: state, running, queued, completed in the last hour, probe failures, "
    "`browser` (idle, starting, ready, failing, absent) with `browser_reason` and "
    "`browser_retry_at`, `browser_limit` (browser jobs it takes at once now) with "
    "`browser_limit_reason` (why fewer than capacity), `kinds` (what its consumer runs; NULL: "
    "not reported, any kind), `not_taking_reason` (why it takes no new job now)"
)


def _comment(name: str, text: str) -> None:
    op.execute(f"COMMENT ON VIEW {name} IS '" + text.replace("'", "''") + "'")


def _previous_comment(name: str) -> str:
    return next(t for kind, n, t in _DESCRIPTIONS.COMMENTS if kind == "VIEW" and n == name)


def upgrade() -> None:
    op.execute(PROGRESS)
    op.execute(HOST_LOAD)
    _comment("progress", PROGRESS_COMMENT)
    _comment("host_load", HOST_LOAD_COMMENT)


def downgrade() -> None:
    # Appended columns cannot be dropped by REPLACE: drop and create the earlier views.
    op.execute("DROP VIEW progress")
    op.execute(_HONEST.PROGRESS)
    op.execute("DROP VIEW host_load")
    op.execute("CREATE VIEW host_load AS" + HOST_LOAD_0015 + _BROWSER.HOST_LOAD_FROM)
    _comment("progress", _previous_comment("progress"))
    _comment("host_load", _previous_comment("host_load"))
