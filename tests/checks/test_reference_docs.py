"""The generated reference pages are the code's own word: each committed page is what
tools/reference.py writes today (a setting's description, a command's help or a metric's help
changed without regenerating fails here), and each lists every setting, command and metric once,
and nothing else. The SQL page needs a database: tests/integration/test_reference_sql.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from scrapefleet.common.settings import Settings
from tools import reference

REPO = Path(__file__).resolve().parents[2]
FIX = "regenerate with .venv/bin/python -m tools.reference --no-sql"


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_committed_page_is_what_the_generator_writes(name: str) -> None:
    committed = (reference.REFERENCE / name).read_text()
    assert committed == reference.PAGES[name](), f"docs/reference/{name} is stale: {FIX}"


def test_every_setting_is_documented_once_and_nothing_else() -> None:
    documented = reference.documented_settings((reference.REFERENCE / "settings.md").read_text())
    assert len(documented) == len(set(documented)), "a setting documented twice"
    assert set(documented) == set(Settings.model_fields)


def test_every_setting_says_what_it_means() -> None:
    # The description is the only place a setting's meaning is written.
    assert [name for name, field in Settings.model_fields.items() if not field.description] == []


def test_every_command_is_documented_once() -> None:
    documented = reference.documented_commands((reference.REFERENCE / "cli.md").read_text())
    commands = reference.all_commands()
    assert len(documented) == len(set(documented))
    assert set(documented) == set(commands)
    assert {"scrapefleet jobs retry", "scrapefleet db upgrade", "scrapefleet-consumer run"} <= set(
        documented
    )


# Programs of [project.scripts] that people do not run: the agent's systemd unit runs it.
UNDOCUMENTED_PROGRAMS = {"scrapefleet-browser-agent"}


def test_the_documented_programs_are_the_installed_ones() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(reference.CLI_COMMANDS) | UNDOCUMENTED_PROGRAMS == set(scripts)
    assert not set(reference.CLI_COMMANDS) & UNDOCUMENTED_PROGRAMS


def test_every_metric_is_documented_once() -> None:
    documented = reference.documented_metrics((reference.REFERENCE / "metrics.md").read_text())
    names = [metric.name for metric in reference.collect_metrics()]
    assert len(documented) == len(set(documented))
    assert set(documented) == set(names)
    # Both registries and the lazily collected fleet figures are there.
    assert {
        "scrapefleet_jobs_assigned_total",
        "scrapefleet_job_duration_seconds",
        "scrapefleet_producer_up",
        "scrapefleet_schedule_overdue_seconds",
        "scrapefleet_host_restarts_total",
    } <= set(documented)


def test_every_shipped_action_is_documented_once() -> None:
    documented = reference.documented_actions(
        (reference.REFERENCE / "action-params.md").read_text()
    )
    assert len(documented) == len(set(documented))
    shipped = {action.name for action in reference.shipped_actions()}
    assert set(documented) == shipped
    assert {"fetch_page", "screenshot", "http_get", "crawl", "crawl_browser", "noop"} <= shipped
