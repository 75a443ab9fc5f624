"""Settings and URLs for a consumer behind a transaction pooler."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.db.pooler import check_listen_url, listen_url, require_direct
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.settings import Settings, load_settings

ENGINE_URL = make_url("postgresql+psycopg://u@pooler:6432/db")


def test_pooled_engine_sends_no_session_options_and_prepares_nothing() -> None:
    settings = Settings(database_pooler="pgbouncer")
    engine = make_engine("postgresql://u@pooler:6432/db", settings=settings)
    direct = make_engine("postgresql://u@db:5432/db", settings=Settings())
    assert "options" not in engine.url.query
    assert engine.url.query["keepalives"] == "1"  # our end's parameters still apply
    assert "statement_timeout" in str(direct.url.query["options"])


def test_listen_goes_to_the_direct_url_or_nowhere_behind_a_pooler() -> None:
    assert listen_url(Settings(), ENGINE_URL) == ENGINE_URL
    assert listen_url(Settings(database_pooler="pgbouncer"), ENGINE_URL) is None
    direct = "postgresql://u@db:5432/db"
    pooled = Settings(database_pooler="pgbouncer", listen_database_url=direct)
    assert listen_url(pooled, ENGINE_URL) == direct


def test_a_polling_consumer_listens_nowhere_and_refuses_a_listen_url() -> None:
    direct = "postgresql://u@db:5432/db"
    assert listen_url(Settings(consumer_wakeup="poll"), ENGINE_URL) is None
    pooled = Settings(database_pooler="pgbouncer", consumer_wakeup="poll")
    assert listen_url(pooled, ENGINE_URL) is None
    check_listen_url(pooled)
    with pytest.raises(SettingsError, match="listen_database_url: consumer_wakeup is poll"):
        check_listen_url(Settings(consumer_wakeup="poll", listen_database_url=direct))


def test_listening_through_the_pooler_itself_is_refused() -> None:
    pooler = "postgresql://u@pooler:6432/db"
    check_listen_url(Settings(database_pooler="pgbouncer", database_url=pooler))
    with pytest.raises(SettingsError, match="listen_database_url: it is database_url"):
        check_listen_url(
            Settings(database_pooler="pgbouncer", database_url=pooler, listen_database_url=pooler)
        )


def test_producer_refuses_a_pooler() -> None:
    require_direct(Settings(), "scrapefleet-producer")
    with pytest.raises(SettingsError, match="database_pooler: scrapefleet-producer needs"):
        require_direct(Settings(database_pooler="pgbouncer"), "scrapefleet-producer")


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("DATABASE_POOLER", "odyssey", "database_pooler"),
        ("LISTEN_DATABASE_URL", "mysql://x", "listen_database_url"),
        ("CONSUMER_WAKEUP", "smoke-signals", "consumer_wakeup"),
    ],
)
def test_bad_pooler_settings_name_the_field(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: str
) -> None:
    monkeypatch.setenv(f"SCRAPEFLEET_{name}", value)
    with pytest.raises(SettingsError, match=field):
        load_settings()
