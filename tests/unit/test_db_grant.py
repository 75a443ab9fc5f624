"""`scrapefleet db grant`'s plan, read without a database; the SCRAM verifier both ways."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.ops.db_grant import (
    Cluster,
    base_plan,
    consumer_plan,
    drop_consumer_plan,
    role_names,
)
from scrapefleet.common.ops.scram import scram_sha256_verifier

pytestmark = pytest.mark.timeout(10)

PLUGIN = Path(__file__).parents[2] / "ansible/roles/database/filter_plugins/scram.py"
NAMES = role_names("sf")


def _cluster(*existing: str, superuser: bool = True) -> Cluster:
    return Cluster("fleet", "public", "admin", superuser, frozenset(existing), ())


def test_the_verifier_matches_the_ansible_filters() -> None:
    spec = importlib.util.spec_from_file_location("scram_plugin", PLUGIN)
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    salt = "c2FsdHNhbHRzYWx0c2FsdA=="
    for password in ("pencil", "pässwörd", "a'b\"c"):
        ours = scram_sha256_verifier(password, salt=salt)
        assert ours == plugin.scram_sha256_verifier(password, salt=salt)
        assert ours.startswith("SCRAM-SHA-256$4096:") and password not in ours


def test_roles_are_created_once_then_altered() -> None:
    first = base_plan(NAMES, _cluster())
    again = base_plan(NAMES, _cluster("sf_owner", "sf_producer", "sf_reporting"))
    assert first[:3] == [
        'CREATE ROLE "sf_owner" NOLOGIN',
        'CREATE ROLE "sf_producer" LOGIN NOINHERIT',
        'CREATE ROLE "sf_reporting" LOGIN NOINHERIT',
    ]
    assert [s.split()[0] for s in again[:3]] == ["ALTER"] * 3
    assert first[3:] == again[3:]
    assert 'REVOKE CREATE ON SCHEMA "public" FROM PUBLIC' in first


def test_a_non_superuser_admin_becomes_a_member_of_the_owner() -> None:
    assert 'GRANT "sf_owner" TO "admin"' in base_plan(NAMES, _cluster(superuser=False))
    assert 'GRANT "sf_owner" TO "admin"' not in base_plan(NAMES, _cluster())


def test_a_consumer_gets_no_grant_on_trust_fields_or_audit_tables() -> None:
    plan = " ".join(consumer_plan(NAMES, _cluster(), "web-1", "SCRAM-SHA-256$x"))
    assert '"sf_consumer_web-1"' in plan and "PASSWORD 'SCRAM-SHA-256$x'" in plan
    for table in ("host_access", "job_events", "webhook_deliveries", "db_roles", "jobs_archive"):
        assert table not in plan.replace('INSERT INTO "public".db_roles', ""), table
    # Host rows are written through the host_* functions only: no INSERT or UPDATE grant, and
    # one an older run made is revoked.
    assert 'REVOKE INSERT, UPDATE ON "public".hosts' in plan
    assert 'GRANT SELECT ON "public".hosts TO' in plan and "UPDATE (state, state_reason" not in plan
    kept = consumer_plan(NAMES, _cluster("sf_consumer_web-1"), "web-1", None)
    # Its password untouched.
    assert kept[0] == 'ALTER ROLE "sf_consumer_web-1" LOGIN NOINHERIT CONNECTION LIMIT 20'


def test_dropping_a_consumer_that_never_was_drops_nothing() -> None:
    assert drop_consumer_plan(NAMES, _cluster(), "gone") == []
    assert drop_consumer_plan(NAMES, _cluster("sf_consumer_gone"), "gone")[-1] == (
        'DROP ROLE "sf_consumer_gone"'
    )


@pytest.mark.parametrize("prefix", ["", "Fleet", "a-b", "x;drop"])
def test_a_bad_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(SettingsError, match="--prefix"):
        role_names(prefix)


def test_a_role_name_past_63_bytes_is_refused_not_cut() -> None:
    with pytest.raises(SettingsError, match="63 bytes"):
        NAMES.consumer("h" * 60)
