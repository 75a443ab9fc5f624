"""Every connection's timeouts and keepalives: added to the URL where it names none, the URL
winning wherever it does; no database needed."""

from __future__ import annotations

import os
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from scrapefleet.common.db.engines import (
    libpq_url,
    migration_url,
    option_names,
    with_connection_defaults,
)
from scrapefleet.common.db.migrate import alembic_config
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.producer.leader import leader_idle_timeout_s

BASE = "postgresql://scrapefleet:pw@db.example:5432/fleet"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SCRAPEFLEET_") or key == "PGOPTIONS":
            monkeypatch.delenv(key)


def _settings(**overrides: Any) -> Settings:
    return load_settings(**overrides)


def _options(query: Any) -> dict[str, str]:
    """The -c name=value pairs of an options string, in order (a later one wins)."""
    pairs: dict[str, str] = {}
    for word in query["options"].split():
        if word != "-c":
            name, value = word.split("=", 1)
            pairs[name] = value
    return pairs


def test_defaults_reach_both_ends_of_the_socket_and_the_server() -> None:
    query = with_connection_defaults(BASE, _settings()).query
    assert {k: query[k] for k in query if k != "options"} == {
        "connect_timeout": "5",
        "keepalives": "1",
        "keepalives_idle": "10",
        "keepalives_interval": "5",
        "keepalives_count": "3",
        "tcp_user_timeout": "30000",
    }
    assert _options(query) == {
        "tcp_keepalives_idle": "10",
        "tcp_keepalives_interval": "5",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "30000",
        "statement_timeout": "600000",
        "lock_timeout": "60000",
        "idle_in_transaction_session_timeout": "300000",
    }


def test_what_the_url_says_wins_and_the_server_end_follows_it() -> None:
    url = f"{BASE}?keepalives_idle=7&tcp_user_timeout=4000&connect_timeout=2&sslmode=disable"
    url += "&options=-c%20statement_timeout%3D1234%20-c%20search_path%3Dfleet"
    query = with_connection_defaults(url, _settings(db_sslmode="verify-full")).query
    assert query["keepalives_idle"] == "7" and query["tcp_user_timeout"] == "4000"
    assert query["connect_timeout"] == "2" and query["sslmode"] == "disable"
    options = _options(query)
    assert options["statement_timeout"] == "1234" and options["search_path"] == "fleet"
    assert options["tcp_keepalives_idle"] == "7" and options["tcp_user_timeout"] == "4000"
    # The user's own options come last, so the server would read them last too.
    assert query["options"].endswith("-c statement_timeout=1234 -c search_path=fleet")


def test_keepalives_turned_off_in_the_url_stay_off_at_the_server_too() -> None:
    query = with_connection_defaults(f"{BASE}?keepalives=0", _settings()).query
    assert query["keepalives"] == "0"
    assert not {n for n in _options(query) if n.startswith("tcp_keepalives")}


def test_zero_leaves_a_timeout_to_the_server_and_sslmode_is_only_sent_when_set() -> None:
    settings = _settings(
        db_statement_timeout_s=0,
        db_lock_timeout_s=0,
        db_idle_in_transaction_timeout_s=0,
        db_tcp_user_timeout_s=0,
    )
    query = with_connection_defaults(BASE, settings).query
    assert "tcp_user_timeout" not in query and "sslmode" not in query
    assert set(_options(query)) == {
        "tcp_keepalives_idle",
        "tcp_keepalives_interval",
        "tcp_keepalives_count",
    }
    assert with_connection_defaults(BASE, _settings(db_sslmode="require")).query["sslmode"] == (
        "require"
    )


def test_pgoptions_is_kept_when_the_url_has_no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    # An options parameter silences libpq's PGOPTIONS: fold it in rather than lose it.
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=5s -c work_mem=64MB")
    options = _options(with_connection_defaults(BASE, _settings()).query)
    assert options["lock_timeout"] == "5s" and options["work_mem"] == "64MB"
    assert options["statement_timeout"] == "600000"


def test_applying_the_defaults_twice_changes_nothing() -> None:
    once = with_connection_defaults(BASE, _settings())
    assert with_connection_defaults(once, _settings()) == once
    # Also through a rendered string, as the daemons pass an engine's URL along.
    rendered = once.render_as_string(hide_password=False)
    assert with_connection_defaults(rendered, _settings()) == once


def test_the_libpq_url_keeps_spaces_in_options() -> None:
    # SQLAlchemy renders a space as '+', which libpq would pass on to the server verbatim.
    url = with_connection_defaults(BASE, _settings())
    parsed = conninfo_to_dict(libpq_url(url))
    assert parsed["options"] == url.query["options"]
    assert parsed["keepalives_idle"] == "10" and parsed["password"] == "pw"
    assert conninfo_to_dict(libpq_url(BASE)) == conninfo_to_dict(BASE)


def test_option_names_read_every_form_the_server_accepts() -> None:
    assert option_names("-c statement_timeout=1s -cLock_Timeout=2s --search-path=x") == {
        "statement_timeout",
        "lock_timeout",
        "search_path",
    }
    assert option_names("") == set()


def test_migrations_run_without_statement_or_lock_timeout_unless_the_url_sets_one() -> None:
    options = _options(migration_url(BASE, _settings()).query)
    assert options["statement_timeout"] == "0" and options["lock_timeout"] == "0"
    assert options["idle_in_transaction_session_timeout"] == "300000"
    own = _options(migration_url(f"{BASE}?options=-c%20lock_timeout%3D9s", _settings()).query)
    assert own["lock_timeout"] == "9s" and own["statement_timeout"] == "0"
    # What Alembic's env.py is given (interpolation-escaped) carries it.
    rendered = alembic_config(BASE).get_main_option("sqlalchemy.url")
    assert rendered is not None and "statement_timeout%3D0" in rendered


def test_the_leader_idle_timeout_stays_well_above_the_producer_interval() -> None:
    assert leader_idle_timeout_s(_settings()) == 60.0
    assert leader_idle_timeout_s(_settings(producer_interval_s=30)) == 120.0
    assert leader_idle_timeout_s(_settings(leader_idle_timeout_s=5)) == 5.0
    assert leader_idle_timeout_s(_settings(leader_idle_timeout_s=0)) == 0.0
