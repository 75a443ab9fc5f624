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
- What holds work back is read through the pending jobs' indexes for the few paused keys,
  kinds and crawls and the limited keys, not by sorting the backlog. Measured on 1,000,000
  pending jobs (1,000 keys, 5 kinds; this 2-core machine under other load): 0022's view
  0.35-0.45 s, this one 1.9-2.6 s, although each added part reads next to nothing; the
  producer's metrics read the oldest pending age alone (common.reads.progress).
- ``host_load`` shows ``kinds`` (the kinds the host's consumer runs, sorted; NULL: not
  reported, runs any kind) and ``not_taking_reason`` (why it takes no new job now: its state
  and that state's reason, or full), so the host side of a waiting kind is one read away.

Revision ID: 0036
Revises: 0032
Create Date: 2026-11-28
"""

import importlib

from alembic import op

revision = "0036"
down_revision = "0032"
branch_labels = None
depends_on = None

_HONEST = importlib.import_module("scrapefleet.migrations.versions.0022_honest_numbers")
_BROWSER = importlib.import_module("scrapefleet.migrations.versions.0005_browser_capability")
_BROWSER_LIMIT = importlib.import_module("scrapefleet.migrations.versions.0015_browser_limit")
_DESCRIPTIONS = importlib.import_module("scrapefleet.migrations.versions.0030_descriptions")

# Reasons named in no_eta_reason; more are "and N more".
NAMED_REASONS = 3

# Everything beyond 0022's one scan of the unfinished jobs is read through the pending jobs'
# indexes (by kind, by rate key, by crawl) for the few keys, kinds and crawls that can hold work
# back: a backlog of a million jobs costs what it cost before, not a sort of the backlog.
PROGRESS = f"""
CREATE OR REPLACE VIEW progress AS
WITH RECURSIVE counts AS (
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
), paused AS (
    SELECT scope, name FROM live_controls WHERE paused
), pending_kinds AS (
    -- The kinds of the pending jobs, by a loose scan of the pending-by-kind index (one probe a
    -- kind), read only while some host says which kinds it runs.
    (SELECT kind FROM jobs
     WHERE status = 'pending' AND (SELECT kinds_reported FROM fleet_now)
     ORDER BY kind LIMIT 1)
    UNION ALL
    SELECT (SELECT j.kind FROM jobs j WHERE j.status = 'pending' AND j.kind > k.kind
            ORDER BY j.kind LIMIT 1)
    FROM pending_kinds k WHERE k.kind IS NOT NULL
), reasons AS (
    -- Pending jobs that wait on something only an operator or a host can change (what
    -- common.store.producing.assignment leaves out of every pending read), with why.
    SELECT (SELECT count(*) FROM jobs j WHERE j.status = 'pending' AND j.rate_key = p.name)
               AS jobs,
           format('of rate key %L paused by an operator', p.name) AS why
    FROM paused p WHERE p.scope = 'rate_key'
    UNION ALL
    SELECT (SELECT count(*) FROM jobs j WHERE j.status = 'pending' AND j.kind = p.name),
           format('of kind %L paused by an operator', p.name)
    FROM paused p WHERE p.scope = 'kind'
    UNION ALL
    SELECT (SELECT count(*) FROM jobs j
            WHERE j.status = 'pending' AND j.crawl_id = CAST(p.name AS bigint)),
           format('of crawl %s paused by an operator', p.name)
    FROM paused p WHERE p.scope = 'crawl' AND p.name ~ '^[0-9]{{1,18}}$'
    UNION ALL
    SELECT (SELECT count(*) FROM jobs j WHERE j.status = 'pending' AND j.kind = k.kind),
           format('of kind %L: no active host runs it', k.kind)
    FROM pending_kinds k
    WHERE k.kind IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.state = 'active'
                      AND (h.kinds IS NULL OR jsonb_exists(h.kinds, k.kind)))
      AND NOT EXISTS (SELECT 1 FROM paused p WHERE p.scope = 'kind' AND p.name = k.kind)
), held_total AS (
    -- A job held for two reasons (its key and its kind paused) counts in each reason's line.
    SELECT CAST(LEAST(coalesce(sum(jobs), 0), (SELECT pending FROM counts)) AS bigint) AS held,
           array_agg(jobs || ' job(s) ' || why ORDER BY jobs DESC, why) AS reasons
    FROM reasons WHERE jobs > 0
), floors AS (
    -- The least time each key with a row of its own needs for its pending jobs: after a
    -- site's pause, at its limit (its own, or the default's, scaled by its back-off), as the
    -- rate_limits view shows them.
    SELECT max(coalesce(extract(epoch FROM CASE WHEN r.paused_until > now()
                                                THEN r.paused_until - now() END), 0)
               + coalesce(60.0 * n.pending / (CASE WHEN r.named THEN r.per_minute
                                                   ELSE d.per_minute END * r.factor), 0))
               AS key_s
    FROM rate_keys r
    LEFT JOIN rate_keys d ON d.key = '*'
    CROSS JOIN LATERAL (SELECT count(*) AS pending FROM jobs j
                        WHERE j.status = 'pending' AND j.rate_key = r.key) AS n
    WHERE r.key <> '*' AND n.pending > 0
), default_floor AS (
    -- Every other key at the default per-minute limit: the most pending key's time. One
    -- ordered pass of the pending-by-key index, only while the default has such a limit.
    SELECT 60.0 * max(c.pending) / d.per_minute AS key_s
    FROM rate_keys d
    CROSS JOIN LATERAL (
        -- d.per_minute makes it depend on the row: without a default limit, never run.
        SELECT count(*) AS pending FROM jobs j
        WHERE d.per_minute IS NOT NULL AND j.status = 'pending' AND j.rate_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM rate_keys n WHERE n.named AND n.key = j.rate_key)
        GROUP BY j.rate_key
    ) AS c
    WHERE d.key = '*' AND d.per_minute IS NOT NULL
    GROUP BY d.per_minute
), kind_floors AS (
    SELECT max(60.0 * (SELECT count(*) FROM jobs j WHERE j.status = 'pending' AND j.kind = l.name)
               / l.per_minute) AS kind_s
    FROM live_controls l WHERE l.scope = 'kind' AND l.per_minute IS NOT NULL
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
               v.remaining * 300.0 / d.last_5m, fl.key_s,
               (SELECT key_s FROM default_floor), kf.kind_s))
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
