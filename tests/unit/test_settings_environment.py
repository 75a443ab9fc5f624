"""Settings that forgive the documented form and refuse what is surely a mistake, each with one
line naming the setting: comma-separated lists, unknown SCRAPEFLEET_* variables, infinities."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.settings import (
    NOT_SETTINGS,
    NOT_SETTINGS_PREFIXES,
    Settings,
    load_settings,
)

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
# Names that are no variable of ours: the dashboard's Flask config keys, and the typo the tests
# make on purpose.
NOT_VARIABLES = {"SCRAPEFLEET_ENGINE", "SCRAPEFLEET_SETTINGS", "SCRAPEFLEET_JOB_TIMEOUT"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SCRAPEFLEET_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("mypkg.scrapers:prices", ["mypkg.scrapers:prices"]),  # the documented form
        ("a.b:c, d.e:f ,", ["a.b:c", "d.e:f"]),
        ('["a.b:c", "d.e:f"]', ["a.b:c", "d.e:f"]),
        ("", []),
    ],
)
def test_actions_from_the_environment_comma_separated_or_json(
    value: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEFLEET_ACTIONS", value)
    assert load_settings().actions == expected


def test_networks_comma_separated_and_a_bad_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_WEBHOOK_ALLOW_NETWORKS", "10.20.0.0/16, 192.168.1.0/24")
    assert load_settings().webhook_allow_networks == ["10.20.0.0/16", "192.168.1.0/24"]
    monkeypatch.setenv("SCRAPEFLEET_WEBHOOK_ALLOW_NETWORKS", "10.20.0.0/16,nope")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "invalid setting webhook_allow_networks (SCRAPEFLEET_WEBHOOK_ALLOW_NETWORKS):"
        " 'nope' is not an IP address or CIDR network"
    )


def test_a_broken_json_list_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCRAPEFLEET_ACTIONS", '["a.b:c"')
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("invalid setting actions (SCRAPEFLEET_ACTIONS): not a JSON list")
    assert "\n" not in message


def test_a_list_in_the_toml_file_may_be_a_string_too(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('actions = "a.b:c,d.e:f"\nwebhook_allow_networks = ["10.0.0.0/8"]\n')
    settings = load_settings(config)
    assert settings.actions == ["a.b:c", "d.e:f"]
    assert settings.webhook_allow_networks == ["10.0.0.0/8"]


def test_an_unknown_variable_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_JOB_TIMEOUT", "30")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "unknown setting SCRAPEFLEET_JOB_TIMEOUT in the environment;"
        " did you mean SCRAPEFLEET_JOB_TIMEOUT_S?"
    )


def test_the_projects_own_variables_are_not_settings_and_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text("capacity = 2\n")
    for name in NOT_SETTINGS:
        monkeypatch.setenv(name, str(config))
    monkeypatch.setenv("SCRAPEFLEET_TEST_SLOWNESS", "2")
    monkeypatch.setenv("SCRAPEFLEET_BENCH_DATABASE_URL", "postgresql://x/y")
    assert load_settings().capacity == 2


def test_every_scrapefleet_variable_the_repository_names_is_a_setting_or_known() -> None:
    """A variable a harness or the stack sets must not stop every daemon it reaches."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found: set[str] = set()
    for name in files:
        path = REPO / name
        if path.suffix not in {".py", ".md", ".yml", ".yaml", ".j2", ".sh", ".toml", ".cfg"}:
            continue
        if not path.is_file():
            continue
        found |= set(re.findall(r"\bSCRAPEFLEET_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    settings = {f"SCRAPEFLEET_{name.upper()}" for name in Settings.model_fields}
    unknown = {
        name
        for name in found
        if name not in settings
        and name not in NOT_VARIABLES
        and name not in NOT_SETTINGS
        and not name.startswith(NOT_SETTINGS_PREFIXES)
    }
    assert unknown == set()


@pytest.mark.parametrize("value", ["1e999", "inf", "-inf", "nan", "Infinity"])
def test_non_finite_numbers_are_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPEFLEET_JOB_TIMEOUT_S", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        "invalid setting job_timeout_s (SCRAPEFLEET_JOB_TIMEOUT_S): Input should be a finite number"
    )


def test_non_finite_numbers_in_the_file_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("backoff_max_s = inf\n")
    with pytest.raises(SettingsError, match=r"invalid setting backoff_max_s .*finite"):
        load_settings(config)


@pytest.mark.parametrize("value", ["", "none", "None", "0"])
def test_the_crawl_site_concurrency_can_be_unset_from_the_environment(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEFLEET_CRAWL_SITE_CONCURRENCY", value)
    assert load_settings().crawl_site_concurrency is None


def test_the_crawl_site_concurrency_can_be_unset_in_the_file(tmp_path: Path) -> None:
    for text in ("crawl_site_concurrency = 0\n", 'crawl_site_concurrency = "none"\n'):
        path = tmp_path / "scrapefleet.toml"
        path.write_text(text)
        assert load_settings(path).crawl_site_concurrency is None
    path.write_text("crawl_site_concurrency = -1\n")
    with pytest.raises(SettingsError, match="crawl_site_concurrency"):
        load_settings(path)
    assert load_settings(crawl_site_concurrency=5).crawl_site_concurrency == 5
