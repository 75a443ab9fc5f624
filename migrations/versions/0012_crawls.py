"""Crawls: jobs that make jobs (parent, depth, dedupe across a crawl).

- ``jobs.parent_id``, ``jobs.depth``, ``jobs.crawl_id``: the job whose completion inserted this
  one, how many such steps from the crawl's root (the root is 0), and the crawl it belongs to.
  A crawl's id is its root job's id, so the root has ``crawl_id = id``.
- ``crawl_runs``: one row per crawl, its bounds (``max_depth``, ``max_jobs``) and how many jobs
  it holds so far. ``scrapefleet crawl`` makes one with the root job; a user action's job that
  spawns children without one gets one on the spot, with the column defaults as bounds.
- ``crawl_seen``: every dedupe key a crawl has ever inserted a job for, whatever became of the
  job (retention may archive it): a crawl never visits one URL twice. With the nearest depth
  it was offered at and the job it became.
- ``spawn_children(host, spawns)``: the one way a consumer inserts jobs, for all the parents a
  transaction completes (``[{job, attempt, children}]``). Its role may not INSERT into ``jobs``
  (0008), so this runs as the owner (SECURITY DEFINER, fixed search path) and checks what the
  row policies would: each job is the CALLER's (a consumer role's host from ``db_roles``,
  whatever ``host`` it passes), in processing with that attempt, locked FOR UPDATE until the
  caller's transaction ends. The completion that follows in the same transaction therefore
  moves it; an attempt that is no longer the caller's inserts nothing. Children beyond
  ``max_depth`` or the crawl's ``max_jobs`` are dropped, a dedupe key the crawl has seen is not
  inserted again; when it is offered nearer the root than it was seen, its unfinished job
  takes the nearer depth (its own children are spawned from its row's depth at completion), so
  how deep a page counts depends less on the order the pages ran in. Locks are taken in one
  order, the crawls' rows then the jobs', each by id: no two callers deadlock. A function
  rather than a policy: the checks span the parent's row, the crawl's row and its seen set,
  and a consumer must not be able to insert a job any other way.
- ``crawls``: the view for a psql prompt, pages done / pending / failed and the depth reached,
  archived jobs included.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
# Bounds of a crawl nobody started explicitly (a user action's job spawning children).
DEFAULT_MAX_DEPTH = 5
DEFAULT_MAX_JOBS = 10_000
MAX_CHILDREN_PER_CALL = (
    1000  # common.actions.spawn.MAX_SPAWN_PER_ATTEMPT: the caller refuses more first
)

BAD_SHAPE_MESSAGE = (
    "not a list of {job, attempt, children}, each child with a kind and an object payload,"
    f" at most {MAX_CHILDREN_PER_CALL} a job"
)
# A list's entries and their shapes: refused as a whole when one is wrong (the caller, the
# consumer's runner, checks them first; this is for a caller that did not).
BAD_SHAPE = f"""
    EXISTS (SELECT 1 FROM jsonb_array_elements(p_spawns) AS s(entry)
            WHERE jsonb_typeof(entry->'job') IS DISTINCT FROM 'number'
               OR jsonb_typeof(entry->'attempt') IS DISTINCT FROM 'number'
               OR jsonb_typeof(entry->'children') IS DISTINCT FROM 'array'
               OR CASE WHEN jsonb_typeof(entry->'children') = 'array'
                       THEN jsonb_array_length(entry->'children') > {MAX_CHILDREN_PER_CALL}
                         OR EXISTS (
                            SELECT 1 FROM jsonb_array_elements(entry->'children') AS c(child)
                            WHERE jsonb_typeof(child->'kind') IS DISTINCT FROM 'string'
                               OR jsonb_typeof(child->'payload') IS DISTINCT FROM 'object')
                  END)"""

# One parent's children, in one statement: keys offered twice count at their first place; keys
# the crawl has seen are not inserted again, but when one is now offered nearer the root, its
# job (if not finished: it spawns at completion, from its row's depth) and its seen row take
# the nearer depth; the rest, within max_jobs, are inserted with ids taken first, so that
# crawl_seen records which job each key became.
SPAWN_ONE = """
    WITH entries AS (
        SELECT e.child, e.n, e.child->>'dedupe_key' AS key
        FROM jsonb_array_elements(item->'children') WITH ORDINALITY AS e(child, n)),
    first_of_key AS (
        SELECT DISTINCT ON (key) n FROM entries WHERE key IS NOT NULL ORDER BY key, n),
    known AS (
        SELECT en.n, s.dedupe_key, s.depth, s.job_id FROM entries en
        JOIN crawl_seen s ON s.crawl_id = crawl AND s.dedupe_key = en.key
        WHERE en.n IN (SELECT n FROM first_of_key)),
    nearer AS (
        UPDATE crawl_seen s SET depth = parent.depth + 1 FROM known k
        WHERE s.crawl_id = crawl AND s.dedupe_key = k.dedupe_key AND k.depth > parent.depth + 1
        RETURNING s.job_id),
    relaxed AS (
        UPDATE jobs SET depth = parent.depth + 1
        WHERE id IN (SELECT job_id FROM nearer) AND depth > parent.depth + 1
          AND status IN ('pending', 'queued', 'processing')),
    fresh AS (
        SELECT en.child, en.n, en.key FROM entries en
        WHERE en.key IS NULL
           OR (en.n IN (SELECT n FROM first_of_key) AND en.n NOT IN (SELECT n FROM known))
        ORDER BY en.n
        LIMIT greatest(bounds.max_jobs - bounds.jobs_count, 0)),
    numbered AS (
        SELECT f.*, nextval(pg_get_serial_sequence('jobs', 'id')) AS id
        FROM (SELECT * FROM fresh ORDER BY n) f),
    seen AS (
        INSERT INTO crawl_seen (crawl_id, dedupe_key, depth, job_id)
        SELECT crawl, key, parent.depth + 1, id FROM numbered WHERE key IS NOT NULL),
    added AS (
        INSERT INTO jobs (id, kind, payload, priority, max_attempts, needs_browser,
                          parent_id, depth, crawl_id)
        SELECT id, child->>'kind', child->'payload',
               coalesce((child->>'priority')::int, parent.priority), parent.max_attempts,
               coalesce((child->>'needs_browser')::boolean, false),
               parent.id, parent.depth + 1, crawl
        FROM numbered ORDER BY n
        RETURNING 1)
    SELECT count(*) INTO children_inserted FROM added"""

# Locks in one order for every caller, crawls (by id) before jobs (by id): two hosts completing
# pages of two crawls, or a page whose depth another crawl page lowers, never deadlock.
SPAWN_FUNCTION = f"""
CREATE FUNCTION spawn_children(p_host text, p_spawns jsonb)
RETURNS TABLE (parent_job bigint, children_inserted int)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    caller_host text := db_role_host(session_user);
    owner_oid oid := (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass);
    item jsonb;
    parent record;
    bounds record;
    crawl bigint;
BEGIN
    IF caller_host IS NULL THEN
        -- Not a consumer role: the producer's, or the owner's (one URL for everything).
        IF NOT (db_role_sees_all(session_user) OR pg_has_role(session_user, owner_oid, 'MEMBER'))
        THEN
            RAISE EXCEPTION 'role % may not spawn jobs', session_user
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        caller_host := p_host;
    END IF;
    IF jsonb_typeof(p_spawns) IS DISTINCT FROM 'array' OR {BAD_SHAPE} THEN
        RAISE EXCEPTION 'spawn_children: %', {BAD_SHAPE_MESSAGE!r}
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The crawls first: of the caller's attempts in processing (a job spawning with no crawl
    -- yet starts its own), created if need be, then locked in id order.
    INSERT INTO crawl_runs (id)
        SELECT coalesce(j.crawl_id, j.id) FROM jsonb_array_elements(p_spawns) AS s(entry)
        JOIN jobs j ON j.id = (entry->>'job')::bigint
        WHERE j.status = 'processing' AND j.attempts = (entry->>'attempt')::int
          AND j.host = caller_host
        ORDER BY 1
        ON CONFLICT (id) DO NOTHING;
    PERFORM 1 FROM crawl_runs WHERE id IN (
        SELECT coalesce(j.crawl_id, j.id) FROM jsonb_array_elements(p_spawns) AS s(entry)
        JOIN jobs j ON j.id = (entry->>'job')::bigint
        WHERE j.status = 'processing' AND j.attempts = (entry->>'attempt')::int
          AND j.host = caller_host)
        ORDER BY id FOR UPDATE;
    -- Then each parent, in id order: still the caller's attempt, locked until its completion
    -- (in the caller's transaction) moves it.
    FOR item IN SELECT value FROM jsonb_array_elements(p_spawns)
                 ORDER BY (value->>'job')::bigint LOOP
        SELECT id, depth, crawl_id, priority, max_attempts INTO parent FROM jobs
            WHERE id = (item->>'job')::bigint AND status = 'processing'
              AND attempts = (item->>'attempt')::int AND host = caller_host
            FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- no longer this caller's attempt: nothing inserted
        crawl := coalesce(parent.crawl_id, parent.id);
        IF parent.crawl_id IS NULL THEN
            UPDATE jobs SET crawl_id = crawl WHERE id = parent.id;
        END IF;
        SELECT max_depth, max_jobs, jobs_count INTO bounds FROM crawl_runs WHERE id = crawl;
        children_inserted := 0;
        IF parent.depth + 1 <= bounds.max_depth THEN
            {SPAWN_ONE};
            UPDATE crawl_runs SET jobs_count = jobs_count + children_inserted WHERE id = crawl;
        END IF;
        parent_job := parent.id;
        RETURN NEXT;
    END LOOP;
END
$$
"""

UNFINISHED = "('pending', 'queued', 'processing')"
CRAWLS_VIEW = f"""
CREATE VIEW crawls AS
SELECT c.id AS crawl_id,
       c.seed,
       c.max_depth,
       c.max_jobs,
       c.jobs_count AS jobs,
       count(j.status) FILTER (WHERE j.status = 'completed') AS done,
       count(j.status) FILTER (WHERE j.status IN {UNFINISHED}) AS pending,
       count(j.status) FILTER (WHERE j.status = 'failed') AS failed,
       count(j.status) FILTER (WHERE j.status = 'cancelled') AS cancelled,
       max(j.depth) FILTER (WHERE j.status = 'completed') AS depth_reached,
       c.created_at,
       max(j.finished_at) AS last_finished_at
FROM crawl_runs c
LEFT JOIN (
    SELECT crawl_id, status, depth, finished_at FROM jobs WHERE crawl_id IS NOT NULL
    UNION ALL
    SELECT crawl_id, status, depth, finished_at FROM jobs_archive WHERE crawl_id IS NOT NULL
) j ON j.crawl_id = c.id
GROUP BY c.id
"""


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("parent_id", sa.BigInteger))
        op.add_column(table, sa.Column("depth", sa.Integer, nullable=False, server_default="0"))
        op.add_column(table, sa.Column("crawl_id", sa.BigInteger))
    op.create_index(
        "jobs_crawl_idx",
        "jobs",
        ["crawl_id", "status"],
        postgresql_where=sa.text("crawl_id IS NOT NULL"),
    )
    op.create_index(
        "jobs_archive_crawl_idx",
        "jobs_archive",
        ["crawl_id"],
        postgresql_where=sa.text("crawl_id IS NOT NULL"),
    )
    op.create_table(
        "crawl_runs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("seed", sa.Text),
        sa.Column("max_depth", sa.Integer, nullable=False, server_default=str(DEFAULT_MAX_DEPTH)),
        sa.Column("max_jobs", sa.Integer, nullable=False, server_default=str(DEFAULT_MAX_JOBS)),
        sa.Column("jobs_count", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("max_depth >= 0", name="crawl_runs_max_depth_not_negative"),
        sa.CheckConstraint("max_jobs >= 1", name="crawl_runs_max_jobs_positive"),
        comment="One row per crawl (id = its root job's id): bounds and jobs so far",
    )
    op.create_table(
        "crawl_seen",
        sa.Column("crawl_id", sa.BigInteger, primary_key=True),
        sa.Column("dedupe_key", sa.Text, primary_key=True),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("job_id", sa.BigInteger),
        comment="Every dedupe key a crawl has inserted a job for: never one URL twice",
    )
    op.execute(SPAWN_FUNCTION)
    op.execute(
        "DO $$ BEGIN EXECUTE format('ALTER FUNCTION spawn_children(text, jsonb)"
        " SET search_path = %I, pg_temp', current_schema()); END $$"
    )
    op.execute(CRAWLS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS crawls")
    op.execute("DROP FUNCTION IF EXISTS spawn_children(text, jsonb)")
    op.drop_table("crawl_seen")
    op.drop_table("crawl_runs")
    op.drop_index("jobs_archive_crawl_idx", table_name="jobs_archive")
    op.drop_index("jobs_crawl_idx", table_name="jobs")
    for table in ("jobs", "jobs_archive"):
        op.drop_column(table, "crawl_id")
        op.drop_column(table, "depth")
        op.drop_column(table, "parent_id")
