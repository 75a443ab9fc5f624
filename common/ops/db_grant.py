"""`scrapefleet db grant`: database roles by duty, created or brought up to date in one go.

    owner      NOLOGIN; owns the database, the schema's tables, views and functions. Migrations
               act as it (SET ROLE, when the database names it in scrapefleet.owner_role).
    producer   LOGIN, NOINHERIT: reads and writes every table (db_roles only reads); a member
               of the owner only so that `db upgrade` may SET ROLE to it.
    reporting  LOGIN: reads every table and view (the dashboard without controls, psql).
    consumer   one LOGIN role per host (``<prefix>_consumer_<host>``): its own host row (read;
               written through the functions of migration 0017) and the jobs assigned to it
               (row-level security, migration 0008), its host_events, nothing else; no grant
               on host_access, job_events, webhook_deliveries.

Row-level security rather than SECURITY DEFINER functions for the consumer's statements: the
store's statements stay as they are, and a statement added later is confined too. The policies
read ``db_roles``, which this command fills. Every statement is idempotent, and all of them run
in one transaction: a failure changes nothing. Passwords are sent as SCRAM verifiers only.

The plan is built by pure functions (``base_plan``, ``consumer_plan``, ``drop_consumer_plan``)
from what exists now, so a unit test can read it; ``apply`` runs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
import psycopg.sql
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.constants import CONSUMER_CONNECTION_LIMIT
from scrapefleet.common.db.engines import OWNER_ROLE_PARAMETER, transaction
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.ops.scram import scram_sha256_verifier
from scrapefleet.common.setting_groups.operator_settings import HOST_NAME

MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer name is cut, silently
_PREFIX = re.compile(r"[a-z_][a-z0-9_]*")

# A consumer writes its own host row only through the functions of migration 0017
# (host_register, host_set_state, host_heartbeat, host_count_claims, host_set_stack_counter),
# which allow a consumer's moves only and bound what it writes. With no UPDATE on hosts its role
# can take no row lock there either. A grant an older `db grant` made is revoked on each run.
# What a consumer writes in the jobs assigned to it (claim, complete, fail, release, requeue);
# never the payload, kind, priority, callback URL or limits an operator submitted.
CONSUMER_JOB_COLUMNS = (
    "status",
    "host",
    "attempts",
    "releases",
    "page_releases",
    "blocks",
    "blocked_on_host",
    "error_class",
    "not_before",
    "last_error",
    "result",
    "artifacts",
    "queued_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
    # A timeout written while the attempt's thread runs on holds its lock key (0016).
    "lingering_host",
    "lingering_claim",
    "lingering_until",
)
# What a consumer writes in its own host's profiles: the cool-down after a blocked job, and
# the blocks in a row that make it grow (cleared by a success).
CONSUMER_PROFILE_COLUMNS = ("state", "cooldown_until", "blocks", "consecutive_blocks")
# PostgreSQL lets every role call these: a consumer's role that took the producer's leader key
# (common.constants.PRODUCER_ADVISORY_LOCK_KEY, or the live controls' keys) and held its session
# kept every producer from leading after the next restart. In this database only the producer
# and the owner (and superusers) may call them. Only the functions' owner, a superuser, can
# change their grants: run by another admin, `db grant` says it could not.
ADVISORY_LOCK_FUNCTIONS = (
    *(
        f"pg_catalog.{name}({args})"
        for name in (
            "pg_advisory_lock",
            "pg_advisory_lock_shared",
            "pg_advisory_unlock",
            "pg_advisory_unlock_shared",
            "pg_advisory_xact_lock",
            "pg_advisory_xact_lock_shared",
            "pg_try_advisory_lock",
            "pg_try_advisory_lock_shared",
            "pg_try_advisory_xact_lock",
            "pg_try_advisory_xact_lock_shared",
        )
        for args in ("bigint", "integer, integer")
    ),
    "pg_catalog.pg_advisory_unlock_all()",
)


@dataclass(frozen=True)
class RoleNames:
    owner: str
    producer: str
    reporting: str
    prefix: str

    def consumer(self, host: str, *, existing: bool = False) -> str:
        """``existing``: a role to drop, made before host names were checked: any name."""
        if not existing and not HOST_NAME.fullmatch(host):
            # The host's name becomes its role's and is its row's (hosts_name_valid refuses
            # '/', '..', a newline): refused here, before anything is created.
            shown = host if len(host) <= 80 else f"{host[:80]}..."
            raise SettingsError(
                f"--consumer: host name {shown!r}: letters, digits and '-' in labels separated"
                " by dots, at most 253 characters"
            )
        return _checked_name(f"{self.prefix}_consumer_{host}", f"consumer role for host {host!r}")


def role_names(
    prefix: str = "scrapefleet",
    *,
    owner: str | None = None,
    producer: str | None = None,
    reporting: str | None = None,
) -> RoleNames:
    """The roles' names: ``<prefix>_owner`` and so on unless given (an existing login, say)."""
    if not _PREFIX.fullmatch(prefix):
        raise SettingsError(f"--prefix {prefix!r}: lower-case letters, digits and '_' only")
    return RoleNames(
        owner=_checked_name(owner or f"{prefix}_owner", "--owner"),
        producer=_checked_name(producer or f"{prefix}_producer", "--producer"),
        reporting=_checked_name(reporting or f"{prefix}_reporting", "--reporting"),
        prefix=prefix,
    )


def _checked_name(name: str, what: str) -> str:
    if not name or len(name.encode()) > MAX_IDENTIFIER_BYTES:
        raise SettingsError(f"{what}: role name {name!r} is empty or over 63 bytes")
    return name


def ident(name: str) -> str:
    return psycopg.sql.Identifier(name).as_string(None)


def literal(value: str) -> str:
    return psycopg.sql.Literal(value).as_string(None)


@dataclass(frozen=True)
class Cluster:
    """What the plan depends on, read from the server before it is made."""

    database: str
    schema: str
    admin: str  # the login running the command
    admin_is_superuser: bool
    existing_roles: frozenset[str]
    # (kind, qualified name) of every object of the schema whose owner is not the owner role;
    # kind is TABLE, VIEW, SEQUENCE (not owned by a column) or FUNCTION (with its arguments).
    foreign_owned: tuple[tuple[str, str], ...]


def _create_or_alter(role: str, attributes: str, cluster: Cluster) -> str:
    verb = "ALTER" if role in cluster.existing_roles else "CREATE"
    return f"{verb} ROLE {ident(role)} {attributes}"


def base_plan(names: RoleNames, cluster: Cluster) -> list[str]:
    """The owner, producer and reporting roles, ownership, and the grants on the schema."""
    db, schema = ident(cluster.database), ident(cluster.schema)
    owner, producer, reporting = ident(names.owner), ident(names.producer), ident(names.reporting)
    plan = [
        _create_or_alter(names.owner, "NOLOGIN", cluster),
        _create_or_alter(names.producer, "LOGIN NOINHERIT", cluster),
        _create_or_alter(names.reporting, "LOGIN NOINHERIT", cluster),
    ]
    if not cluster.admin_is_superuser:  # to hand objects over to the owner, be a member of it
        plan.append(f"GRANT {owner} TO {ident(cluster.admin)}")
    plan += [
        f"GRANT {owner} TO {producer}",  # NOINHERIT: only by SET ROLE, which `db upgrade` does
        f"ALTER DATABASE {db} OWNER TO {owner}",
        f"ALTER DATABASE {db} SET {OWNER_ROLE_PARAMETER} = {literal(names.owner)}",
        *(f"ALTER {kind} {name} OWNER TO {owner}" for kind, name in cluster.foreign_owned),
        f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC",
        f"REVOKE CREATE, TEMPORARY ON DATABASE {db} FROM PUBLIC",
        f"GRANT CONNECT ON DATABASE {db} TO {producer}, {reporting}",
        f"GRANT TEMPORARY ON DATABASE {db} TO {producer}",  # submit stages jobs in a temp table
        f"GRANT USAGE ON SCHEMA {schema} TO {producer}, {reporting}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {producer}",
        f"REVOKE INSERT, UPDATE, DELETE ON {schema}.db_roles FROM {producer}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {producer}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {reporting}",
        # Proxies' passwords (migration 0032): the producer's only, never the reporting role's
        # (the dashboard's), whatever the line above granted.
        "DO $$ BEGIN IF to_regclass('proxy_credentials') IS NOT NULL THEN"
        f" EXECUTE 'REVOKE ALL ON proxy_credentials FROM ' || {literal(reporting)}; END IF; END $$",
        # Sticky sessions' cookies (migration 0040): the same.
        "DO $$ BEGIN IF to_regclass('proxy_session_jars') IS NOT NULL THEN"
        f" EXECUTE 'REVOKE ALL ON proxy_session_jars FROM ' || {literal(reporting)}; END IF;"
        " END $$",
        # Tables a later migration creates (as the owner) get the same grants.
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema}"
        f" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {producer}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema}"
        f" GRANT USAGE, SELECT ON SEQUENCES TO {producer}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema}"
        f" GRANT SELECT ON TABLES TO {reporting}",
    ]
    # The key of the producer's channels (migration 0031) is the owner's alone: the grants on
    # every table above gave it to the producer and reporting roles too.
    plan.append(
        "DO $$ BEGIN IF to_regclass('fleet_secrets') IS NOT NULL THEN"
        f" REVOKE ALL ON fleet_secrets FROM {producer}, {reporting}; END IF; END $$"
    )
    if cluster.admin_is_superuser:
        functions = ", ".join(ADVISORY_LOCK_FUNCTIONS)
        plan += [
            f"REVOKE EXECUTE ON FUNCTION {functions} FROM PUBLIC",
            f"GRANT EXECUTE ON FUNCTION {functions} TO {owner}, {producer}",
        ]
    return plan


def consumer_plan(
    names: RoleNames,
    cluster: Cluster,
    host: str,
    password_verifier: str | None,
    connection_limit: int = CONSUMER_CONNECTION_LIMIT,
) -> list[str]:
    """The host's login role and its grants; the password changes only when one is given.
    ``connection_limit``: the sessions its role may hold at once."""
    role = names.consumer(host)
    db, schema, who = ident(cluster.database), ident(cluster.schema), ident(role)
    attributes = f"LOGIN NOINHERIT CONNECTION LIMIT {int(connection_limit)}"
    if password_verifier is not None:
        attributes += f" PASSWORD {literal(password_verifier)}"
    return [
        _create_or_alter(role, attributes, cluster),
        f"GRANT CONNECT ON DATABASE {db} TO {who}",
        f"GRANT USAGE ON SCHEMA {schema} TO {who}",
        f"REVOKE INSERT, UPDATE ON {schema}.hosts FROM {who}",
        f"GRANT SELECT ON {schema}.hosts TO {who}",
        f"GRANT SELECT ON {schema}.jobs TO {who}",
        f"GRANT UPDATE ({', '.join(CONSUMER_JOB_COLUMNS)}) ON {schema}.jobs TO {who}",
        f"GRANT INSERT ON {schema}.host_events TO {who}",
        # Its own host's profiles only (row policies): read, and cooled down after a block.
        f"GRANT SELECT, UPDATE ({', '.join(CONSUMER_PROFILE_COLUMNS)}) ON {schema}.profiles"
        f" TO {who}",
    ]


def drop_consumer_plan(names: RoleNames, cluster: Cluster, host: str) -> list[str]:
    """Remove the host's role: its grants here, then the role itself (if it exists)."""
    role = names.consumer(host, existing=True)
    if role not in cluster.existing_roles:
        return []
    return [
        f"DROP OWNED BY {ident(role)}",  # its grants in this database (it owns nothing)
        f"DROP ROLE {ident(role)}",
    ]


# Objects of the schema not owned by the owner role, with the words ALTER needs for each. A
# sequence an identity or serial column owns follows its table; an extension's objects stay.
_FOREIGN_OWNED_SQL = sa.text(
    "SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'"
    "   WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,"
    "   format('%I.%I', n.nspname, c.relname) AS name"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm', 'S')"
    "   AND pg_get_userbyid(c.relowner) <> :owner"
    "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass"
    "     AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))"
    " UNION ALL"
    " SELECT 'FUNCTION', format('%I.%I(%s)', n.nspname, p.proname,"
    "   pg_get_function_identity_arguments(p.oid))"
    " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = :schema AND pg_get_userbyid(p.proowner) <> :owner"
    "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
    "     AND d.objid = p.oid AND d.deptype = 'e')"
    " ORDER BY 1, 2"
)
_CLUSTER_SQL = sa.text(
    "SELECT current_database() AS database, current_schema() AS schema,"
    " current_user AS admin, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
    " AS superuser"
)
_ROLES_SQL = sa.text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:names)")
_HAS_ROLES_TABLE_SQL = sa.text("SELECT to_regclass('db_roles') IS NOT NULL")


def read_cluster(conn: Connection, names: RoleNames, roles: Iterable[str]) -> Cluster:
    if not conn.execute(_HAS_ROLES_TABLE_SQL).scalar_one():
        raise SettingsError("the database has no db_roles table: run `scrapefleet db upgrade`")
    here = conn.execute(_CLUSTER_SQL).one()
    wanted = [names.owner, names.producer, names.reporting, *roles]
    existing = frozenset(conn.execute(_ROLES_SQL, {"names": wanted}).scalars())
    foreign = conn.execute(_FOREIGN_OWNED_SQL, {"schema": here.schema, "owner": names.owner})
    return Cluster(
        database=here.database,
        schema=here.schema,
        admin=here.admin,
        admin_is_superuser=bool(here.superuser),
        existing_roles=existing,
        foreign_owned=tuple((r.kind, r.name) for r in foreign),
    )


# Everything the plan can change, as one digest: taken before and after, it tells whether a run
# changed anything (Ansible's "changed"). A password is not in it (PostgreSQL shows none); the
# command changes one only when given one.
_STATE_SQL = sa.text(
    "SELECT md5(coalesce(string_agg(item, E'\\n' ORDER BY item), '')) FROM ("
    " SELECT format('role %s %s %s %s', rolname, rolcanlogin, rolinherit, rolconnlimit) AS item"
    "   FROM pg_roles WHERE rolname = ANY(:names) OR rolname LIKE :consumers"
    " UNION ALL SELECT format('member %s %s', roleid::regrole, member::regrole)"
    "   FROM pg_auth_members WHERE roleid::regrole::text = ANY(:quoted)"
    " UNION ALL SELECT format('rel %s %s %s', c.relname, pg_get_userbyid(c.relowner), c.relacl)"
    "   FROM pg_class c WHERE c.relnamespace = to_regnamespace(:schema)"
    " UNION ALL SELECT format('col %s %s %s', a.attrelid::regclass, a.attname, a.attacl)"
    "   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    "   WHERE c.relnamespace = to_regnamespace(:schema) AND a.attacl IS NOT NULL"
    " UNION ALL SELECT format('fn %s %s', p.oid::regprocedure, pg_get_userbyid(p.proowner))"
    "   FROM pg_proc p WHERE p.pronamespace = to_regnamespace(:schema)"
    " UNION ALL SELECT format('default %s %s', defaclrole::regrole, defaclacl) FROM pg_default_acl"
    " UNION ALL SELECT format('db %s %s', pg_get_userbyid(datdba), datacl)"
    "   FROM pg_database WHERE datname = current_database()"
    " UNION ALL SELECT format('setting %s', setconfig) FROM pg_db_role_setting"
    "   WHERE setrole = 0 AND setdatabase ="
    "     (SELECT oid FROM pg_database WHERE datname = current_database())"
    " UNION ALL SELECT format('schema %s', nspacl) FROM pg_namespace WHERE nspname = :schema"
    " UNION ALL SELECT format('duty %s %s %s', role_name, duty, host) FROM db_roles"
    " UNION ALL SELECT format('advisory %s %s', p.oid::regprocedure, p.proacl) FROM pg_proc p"
    "   WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname LIKE 'pg%advisory%'"
    ") AS state"
)


def _state(conn: Connection, names: RoleNames, schema: str) -> str:
    base = [names.owner, names.producer, names.reporting]
    consumers = names.prefix.replace("_", "\\_") + "\\_consumer\\_%"
    params = {
        "names": base,
        "consumers": consumers,
        "quoted": [ident(n) for n in base] + base,
        "schema": schema,
    }
    return str(conn.execute(_STATE_SQL, params).scalar_one())


@dataclass(frozen=True)
class GrantResult:
    statements: list[str]  # as run, every password verifier shown as '***'
    changed: bool  # whether the roles, grants or duties differ from before the run
    warnings: tuple[str, ...] = ()  # what it could not do, one line each


@dataclass(frozen=True)
class GrantRequest:
    names: RoleNames
    consumers: dict[str, str | None]  # host -> its new password (None: keep the one it has)
    drop_consumers: tuple[str, ...] = ()
    connection_limit: int = CONSUMER_CONNECTION_LIMIT  # of each consumer role named


def apply(engine: Engine, request: GrantRequest) -> GrantResult:
    """Bring the roles and grants up to date in one transaction."""
    names = request.names
    involved = [names.consumer(h) for h in request.consumers]
    involved += [names.consumer(h, existing=True) for h in request.drop_consumers]
    shown: list[str] = []
    with transaction(engine) as conn:
        cluster = read_cluster(conn, names, involved)
        before = _state(conn, names, cluster.schema)
        plan = base_plan(names, cluster)
        for host, password in request.consumers.items():
            verifier = scram_sha256_verifier(password) if password is not None else None
            plan += consumer_plan(names, cluster, host, verifier, request.connection_limit)
        for host in request.drop_consumers:
            plan += drop_consumer_plan(names, cluster, host)
        for statement in plan:
            conn.exec_driver_sql(statement)
            shown.append(re.sub(r"PASSWORD '[^']*'", "PASSWORD '***'", statement))
        # Who is who, for the row policies (in the same transaction as the roles).
        store.register_db_role(conn, names.producer, "producer")
        store.register_db_role(conn, names.reporting, "reporting")
        for host in request.consumers:
            store.register_db_role(conn, names.consumer(host), "consumer", host)
        for host in request.drop_consumers:
            store.forget_db_role(conn, names.consumer(host, existing=True))
        changed = _state(conn, names, cluster.schema) != before
    passwords_set = any(p is not None for p in request.consumers.values())
    warnings: tuple[str, ...] = ()
    if not cluster.admin_is_superuser:
        warnings = (
            f"{cluster.admin} is not a superuser: every role may still take advisory locks"
            " (the producer's leader lock); run db grant as a superuser to take that away",
        )
    return GrantResult(shown, changed or passwords_set, warnings)
