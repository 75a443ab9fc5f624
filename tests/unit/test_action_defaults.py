"""An action's own defaults (register's timeout_s, max_attempts, priority, rate_key), how the
``actions`` setting and installed packages' entry points load actions, and the public API."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from scrapefleet.common import api
from scrapefleet.common.actions.registry import (
    get_action,
    load_user_actions,
    longest_time_limit_s,
    register,
)
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.serving import time_limit_s


@register("test_defaults_slow", timeout_s=600, max_attempts=7, priority=5, rate_key="shop")
def _slow(params: object) -> dict[str, str]:
    return {}


def test_a_jobs_fields_default_to_its_actions() -> None:
    job = validate_job({"kind": "test_defaults_slow"})
    assert (job.priority, job.max_attempts, job.rate_key) == (5, 7, "shop")


def test_a_jobs_own_fields_win_over_its_actions() -> None:
    job = validate_job(
        {"kind": "test_defaults_slow", "priority": 0, "max_attempts": 1, "rate_key": "other"}
    )
    assert (job.priority, job.max_attempts, job.rate_key) == (0, 1, "other")


def test_without_action_defaults_a_job_keeps_todays_defaults() -> None:
    job = validate_job({"kind": "noop"})
    assert (job.priority, job.max_attempts, job.rate_key) == (0, None, None)


def test_an_attempts_time_limit_is_its_actions_else_the_hosts() -> None:
    def claimed(kind: str) -> ClaimedJob:
        return ClaimedJob(1, kind, {}, attempt=1, max_attempts=3, lock_key=None)

    assert time_limit_s(claimed("test_defaults_slow"), 300.0) == 600
    assert time_limit_s(claimed("noop"), 300.0) == 300.0
    assert time_limit_s(claimed("no_such_kind"), 300.0) == 300.0


def test_a_drain_waits_as_long_as_the_longest_attempt_may_run() -> None:
    settings = load_settings(job_timeout_s=300.0)
    assert ConsumerConfig.build(settings, "h1").drain_timeout_s == longest_time_limit_s(300.0)
    assert longest_time_limit_s(300.0) >= 600  # test_defaults_slow's own limit
    assert ConsumerConfig.build(settings, "h1", drain_timeout_s=5.0).drain_timeout_s == 5.0


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ({"timeout_s": 0}, "timeout_s must be above 0"),
        ({"max_attempts": 0}, "max_attempts must be 1 to 100"),
        ({"priority": 10**7}, "priority must be -1000000 to 1000000"),
        ({"rate_key": ""}, "a rate key has 1 to"),
    ],
)
def test_a_bad_default_stops_the_declaring_import(defaults: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        register("test_defaults_bad", **defaults)  # type: ignore[arg-type]


@pytest.fixture
def on_path(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` on sys.path, and the modules imported from it forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_bare_module_registers_every_action_it_declares(on_path: Path) -> None:
    (on_path / "team_bare.py").write_text(
        "from scrapefleet.common.api import register\n"
        "@register('test_bare_one')\n"
        "def one(params): return {'n': 1}\n"
        "@register('test_bare_two', priority=3)\n"
        "def two(params): return {'n': 2}\n"
    )
    load_user_actions(["team_bare"], entry_points=False)
    assert get_action("test_bare_one").func(None) == {"n": 1}
    assert get_action("test_bare_two").priority == 3


def test_an_installed_packages_entry_point_registers_its_actions(on_path: Path) -> None:
    (on_path / "team_pkg.py").write_text(
        "from scrapefleet.common.api import register\n"
        "@register('test_entry_point_kind', max_attempts=2)\n"
        "def kind(params): return {}\n"
    )
    # What pip installs for a package declaring the entry point: found on sys.path.
    dist_info = on_path / "team_pkg-1.2.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: team-pkg\nVersion: 1.2\n")
    (dist_info / "entry_points.txt").write_text("[scrapefleet.actions]\nteam = team_pkg\n")
    load_user_actions([])
    assert get_action("test_entry_point_kind").max_attempts == 2


def test_a_broken_entry_point_is_one_line_naming_it_and_its_package(on_path: Path) -> None:
    (on_path / "team_broken.py").write_text("raise RuntimeError('no config file')\n")
    dist_info = on_path / "team_broken-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: team-broken\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[scrapefleet.actions]\nbroken = team_broken\n")
    with pytest.raises(SettingsError) as caught:
        load_user_actions([])
    assert str(caught.value) == (
        "entry point 'broken' of team-broken (scrapefleet.actions): cannot import"
        " 'team_broken': RuntimeError: no config file"
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_team_module", "cannot import 'no_such_team_module': ModuleNotFoundError"),
        ("team:", "'team:' is not 'module' or 'module:function'"),
        ("a b", "'a b' is not 'module' or 'module:function'"),
        ("json:no_such_function", "'json:no_such_function' is not a function"),
    ],
)
def test_a_bad_actions_setting_is_one_line_naming_it(path: str, message: str) -> None:
    with pytest.raises(SettingsError, match=r"^invalid setting actions: ") as caught:
        load_user_actions([path], entry_points=False)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_public_api_exports_what_a_scraper_needs() -> None:
    for name in api.__all__:
        assert hasattr(api, name), name
    needed = {"Client", "register", "Spawned", "Blocked", "Permanent", "RateLimited", "NewJob"}
    assert needed <= set(api.__all__)


def test_the_cli_says_its_version() -> None:
    answer = CliRunner().invoke(cli, ["--version"])
    assert answer.exit_code == 0
    assert answer.output == f"scrapefleet, version {importlib.metadata.version('scrapefleet')}\n"
