"""A spawned job goes out through the proxy pool its payload names (a crawl's children inherit
their parent's pool and session there: common.actions.spawn.inherit_identity), as a submitted
job does: ``jobs.proxy_pool`` and ``jobs.proxy_session`` set from the payload by the BEFORE
INSERT trigger ``jobs_spawned_proxy_pool``. Without them a child naming a pool ran straight
from its host's own address, the pool stripped from its params.

The trigger refuses what submit refuses, so that one bad child fails its parent's spawn
(nothing inserted) rather than wait forever or run unproxied: a pool name of the wrong shape,
a pool that does not exist, a session that is not 1-200 characters, a ``"site"`` session
without a URL host. A ``"site"`` session is the URL's host, lower case, as
common.identities.proxy_pools.session_key makes it. It runs as its owner (a consumer's role
has no grant on proxy_pools), and only for a spawned row (``parent_id`` set) whose pool is
not already set.

Revision ID: 0038
Revises: 0037
Create Date: 2026-11-28
"""

from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None

NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # common.identities.proxy_pools.POOL_NAME_SQL
MAX_SESSION_CHARS = 200  # common.identities.proxy_pools.MAX_SESSION_CHARS
# scheme://[userinfo@]host[:port]...: the host, an IPv6 one without its brackets.
URL_HOST = r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(\[[^]]*\]|[^:/?#]*)"

POOL_FUNCTION = f"""
CREATE FUNCTION jobs_spawned_proxy_pool() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    asked jsonb := NEW.payload->'session';
    session text;
BEGIN
    IF jsonb_typeof(NEW.payload) IS DISTINCT FROM 'object'
       OR coalesce(jsonb_typeof(NEW.payload->'proxy_pool'), 'null') = 'null' THEN
        RETURN NEW;
    END IF;
    NEW.proxy_pool := NEW.payload->>'proxy_pool';
    IF jsonb_typeof(NEW.payload->'proxy_pool') <> 'string'
       OR NEW.proxy_pool !~ '{NAME_PATTERN}' THEN
        RAISE EXCEPTION 'spawned job: payload.proxy_pool: not a pool name'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM proxy_pools WHERE name = NEW.proxy_pool) THEN
        RAISE EXCEPTION 'spawned job: payload.proxy_pool: no proxy pool named %',
            quote_literal(NEW.proxy_pool) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(asked), 'null') = 'null' THEN
        RETURN NEW;
    END IF;
    session := CASE WHEN jsonb_typeof(asked) <> 'string' THEN NULL
        WHEN asked #>> '{{}}' = 'site'
        THEN lower(btrim((regexp_match(NEW.payload->>'url', '{URL_HOST}'))[1], '[]'))
        ELSE asked #>> '{{}}' END;
    IF session IS NULL OR btrim(session) = '' OR char_length(session) > {MAX_SESSION_CHARS} THEN
        RAISE EXCEPTION 'spawned job: payload.session: %',
            'must be a text of 1-{MAX_SESSION_CHARS} characters ("site" needs the url''s host)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    NEW.proxy_session := session;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.execute(POOL_FUNCTION)
    # A definer function must not resolve names through a schema its caller can write to.
    op.execute(
        "DO $$ BEGIN EXECUTE format("
        "'ALTER FUNCTION jobs_spawned_proxy_pool() SET search_path = %I, pg_temp',"
        " current_schema()); END $$"
    )
    op.execute(
        "CREATE TRIGGER jobs_spawned_proxy_pool BEFORE INSERT ON jobs FOR EACH ROW"
        " WHEN (NEW.parent_id IS NOT NULL AND NEW.proxy_pool IS NULL)"
        " EXECUTE FUNCTION jobs_spawned_proxy_pool()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_spawned_proxy_pool ON jobs")
    op.execute("DROP FUNCTION jobs_spawned_proxy_pool()")
