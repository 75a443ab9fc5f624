"""Settings: defaults, environment over TOML file, one clear line for anything invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("SCRAPEFLEET_"):
            monkeypatch.delenv(key)


def test_defaults_match_the_contract() -> None:
    settings = load_settings()
    assert (settings.capacity, settings.restart_every, settings.reboot_every) == (6, 20, 80)
    assert settings.browser_retire_every == 20
    assert settings.producer_interval_s == 2.0 and settings.rescue_after_s == 60.0
    assert settings.database_url is None


def test_environment_beats_file_beats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "scrapefleet.toml"
    config.write_text('capacity = 4\nmax_attempts = 7\ndatabase_url = "postgresql://db/x"\n')
    monkeypatch.setenv("SCRAPEFLEET_CAPACITY", "3")
    settings = load_settings(config)
    assert (settings.capacity, settings.max_attempts) == (3, 7)
    assert settings.database_url == "postgresql://db/x"
    monkeypatch.setenv("SCRAPEFLEET_CONFIG", str(config))
    assert load_settings().max_attempts == 7


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SCRAPEFLEET_CAPACITY": "0"}, "invalid setting capacity (SCRAPEFLEET_CAPACITY)"),
        ({"SCRAPEFLEET_DATABASE_URL": "mysql://x"}, "invalid setting database_url"),
        ({"SCRAPEFLEET_LOG_LEVEL": "LOUD"}, "invalid setting log_level"),
        ({"SCRAPEFLEET_PRODUCER_INTERVAL_S": "-1"}, "invalid setting producer_interval_s"),
    ],
)
def test_invalid_values_name_the_setting(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings()


def test_file_problems_are_one_line(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("capacty = 4\n")
    with pytest.raises(SettingsError, match="unknown setting 'capacty'"):
        load_settings(unknown)
    broken = tmp_path / "broken.toml"
    broken.write_text("capacity = \n")
    with pytest.raises(SettingsError, match=f"config file {broken}"):
        load_settings(broken)
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(tmp_path / "missing.toml")


def test_an_unknown_browser_driver_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingsError, match=r"browser_driver \(SCRAPEFLEET_BROWSER_DRIVER\)"):
        load_settings(None, browser_driver="selenoid")
    light = load_settings(None, browser_driver="chromedriver", browser_headless=True)
    assert (light.browser_driver, light.browser_headless) == ("chromedriver", True)
    assert (load_settings(None).browser_driver, load_settings(None).browser_headless) == (
        "grid",
        False,
    )
