"""Attempts that never repeat, and lock keys held while an ended attempt may still run.

- ``jobs.claims``: how many times the job was claimed, ever. The trigger ``jobs_count_claims``
  adds one whenever a job enters processing and refuses any other change, so no writer (a
  consumer's role included) can take it back: each claim's number is a token no earlier
  attempt of the job had. Every write an attempt makes (heartbeat, completion, failure,
  release, block, spawn) is conditional on (job id, claim, host). ``attempts`` stays the job's
  own count of failures, as before: a release still gives an attempt back, the claim is never
  given back.
- ``jobs.lingering_host``, ``lingering_claim``, ``lingering_until``: an attempt ended in the
  database while its thread may still run on its host (a rescue of a silent host, an operator's
  stop, a timeout its consumer wrote while the thread ran on). Its job's lock key stays held
  until that host confirms the attempt ended (``attempts_ended``) or ``lingering_until``
  passes (docs/attempts-and-locks.md says what that promises).
- ``attempts_ended(host, ended)``: a consumer's confirmation, ``[{job, claim}]``. A consumer's
  role may update only jobs assigned to its host (0008), and a rescued job is no longer
  assigned to anyone, so this runs as the owner and checks the caller as spawn_children does.
- ``jobs.page_releases``: the releases the job's page caused (a browser that died under it), of
  all its ``releases``; only these are bounded by the per-job release limit, so a job is never
  failed by its hosts' faults (consumers killed, rescues, stacks down).
- ``spawn_children`` checks the claim rather than the attempt number (``[{job, claim,
  children}]``).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_CRAWLS = importlib.import_module("scrapefleet.migrations.versions.0012_crawls")
_ROLES = importlib.import_module("scrapefleet.migrations.versions.0008_roles_by_duty")
TS = sa.DateTime(timezone=True)

COUNT_CLAIMS_FUNCTION = """
CREATE FUNCTION jobs_count_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.claims := OLD.claims
        + CASE WHEN NEW.status = 'processing' AND OLD.status IS DISTINCT FROM 'processing'
               THEN 1 ELSE 0 END;
    RETURN NEW;
END
$$
"""
# Fired only when it has something to do: a claim, or a write that tried to set the count.
COUNT_CLAIMS_TRIGGER = (
    "CREATE TRIGGER jobs_count_claims BEFORE UPDATE ON jobs FOR EACH ROW"
    " WHEN (NEW.claims IS DISTINCT FROM OLD.claims"
    "   OR (NEW.status = 'processing' AND OLD.status IS DISTINCT FROM 'processing'))"
    " EXECUTE FUNCTION jobs_count_claims()"
)

ATTEMPTS_ENDED_FUNCTION = """
CREATE FUNCTION attempts_ended(p_host text, p_ended jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    caller_host text := db_role_host(session_user);
    owner_oid oid := (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass);
BEGIN
    IF caller_host IS NULL THEN
        IF NOT (db_role_sees_all(session_user) OR pg_has_role(session_user, owner_oid, 'MEMBER'))
        THEN
            RAISE EXCEPTION 'role % may not end attempts', session_user
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        caller_host := p_host;
    END IF;
    IF jsonb_typeof(p_ended) IS DISTINCT FROM 'array' OR EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_ended) AS e(entry)
        WHERE jsonb_typeof(entry->'job') IS DISTINCT FROM 'number'
           OR jsonb_typeof(entry->'claim') IS DISTINCT FROM 'number') THEN
        RAISE EXCEPTION 'attempts_ended: not a list of {job, claim}'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    UPDATE jobs SET lingering_host = NULL, lingering_claim = NULL, lingering_until = NULL
    FROM jsonb_array_elements(p_ended) AS e(entry)
    WHERE jobs.id = (entry->>'job')::bigint AND jobs.lingering_claim = (entry->>'claim')::int
      AND jobs.lingering_host = caller_host
    RETURNING jobs.id;
END
$$
"""


def _spawn_by_claim() -> str:
    """0012's spawn_children, checking each parent's claim instead of its attempt number."""
    text = _CRAWLS.SPAWN_FUNCTION
    replacements = [
        ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
        ("j.attempts = (entry->>'attempt')::int", "j.claims = (entry->>'claim')::int"),
        ("attempts = (item->>'attempt')::int", "claims = (item->>'claim')::int"),
        ("entry->'attempt'", "entry->'claim'"),
        ("{job, attempt, children}", "{job, claim, children}"),
    ]
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return text


def upgrade() -> None:
    for table in ("jobs", "jobs_archive"):
        op.add_column(table, sa.Column("claims", sa.Integer, nullable=False, server_default="0"))
        op.add_column(table, sa.Column("lingering_host", sa.Text))
        op.add_column(table, sa.Column("lingering_claim", sa.Integer))
        op.add_column(table, sa.Column("lingering_until", TS))
        op.add_column(
            table, sa.Column("page_releases", sa.Integer, nullable=False, server_default="0")
        )
    # Jobs under way were claimed at least `attempts` times: their tokens go on from there.
    op.execute("UPDATE jobs SET claims = attempts")
    op.execute(COUNT_CLAIMS_FUNCTION)
    op.execute(COUNT_CLAIMS_TRIGGER)
    op.create_index(
        "jobs_lingering_lock_key_idx",
        "jobs",
        ["lock_key"],
        postgresql_where=sa.text("lock_key IS NOT NULL AND lingering_until IS NOT NULL"),
    )
    op.execute(ATTEMPTS_ENDED_FUNCTION)
    _ROLES._pin_search_path("attempts_ended(text, jsonb)")
    op.execute(_spawn_by_claim())
    _ROLES._pin_search_path("spawn_children(text, jsonb)")


def downgrade() -> None:
    op.execute(_CRAWLS.SPAWN_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    _ROLES._pin_search_path("spawn_children(text, jsonb)")
    op.execute("DROP FUNCTION attempts_ended(text, jsonb)")
    op.drop_index("jobs_lingering_lock_key_idx", table_name="jobs")
    op.execute("DROP TRIGGER jobs_count_claims ON jobs")
    op.execute("DROP FUNCTION jobs_count_claims()")
    for table in ("jobs", "jobs_archive"):
        for column in (
            "page_releases",
            "lingering_until",
            "lingering_claim",
            "lingering_host",
            "claims",
        ):
            op.drop_column(table, column)
