"""`import scrapefleet` is the public API: the names of scrapefleet.common.api and `submit`,
listed in `__all__` and loaded only when one is used (the CLI's `--help` and the daemons import
the package too). That mypy follows them: tests/checks/test_public_api_types.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

import scrapefleet
import scrapefleet.common.api as api

pytestmark = pytest.mark.timeout(120)


def test_the_top_level_package_is_the_api() -> None:
    assert set(scrapefleet.__all__) == {*api.__all__, "submit"}
    for name in scrapefleet.__all__:
        assert getattr(scrapefleet, name) is getattr(api, name), name
    from scrapefleet import Client, Permanent, Spawned, register, submit

    assert (register, Client, Permanent, Spawned) == (
        api.register,
        api.Client,
        api.Permanent,
        api.Spawned,
    )
    assert submit is api.submit
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        scrapefleet.nothing  # noqa: B018


def test_importing_the_package_loads_nothing_until_a_name_is_used() -> None:
    code = (
        "import sys, scrapefleet\n"
        "print('sqlalchemy' in sys.modules, 'pydantic' in sys.modules)\n"
        "scrapefleet.register\n"
        "print('sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["False", "False", "True"]
