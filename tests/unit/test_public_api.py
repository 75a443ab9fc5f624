"""`import scrapefleet` is the public API: the names of scrapefleet.common.api and `submit`,
listed in `__all__`, typed for mypy, and loaded only when one is used (the CLI's `--help` and
the daemons import the package too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import scrapefleet
import scrapefleet.common.api as api

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


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


def test_a_users_code_is_typed_against_the_top_level_package(tmp_path: Path) -> None:
    user = tmp_path / "prices.py"
    user.write_text(
        "from typing import Any\n"
        "from pydantic import BaseModel\n"
        "from scrapefleet import Client, Permanent, register, submit\n\n"
        "class Params(BaseModel):\n"
        "    url: str\n\n"
        "@register('prices', Params)\n"
        "def prices(params: Params) -> dict[str, Any]:\n"
        "    raise Permanent('gone')\n\n"
        "job: int | None = submit('prices', {'url': 'https://example.org/'})\n"
        "wrong: str = submit('prices')\n"
        "Client().nothing\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(user)],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=tmp_path,
    )
    errors = [line.split(": error: ")[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 2, out.stdout  # the two mistakes, nothing else (no import-not-found)
    assert errors[0].startswith("Incompatible types in assignment"), errors
    assert errors[1].startswith('"Client" has no attribute "nothing"'), errors
