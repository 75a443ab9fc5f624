"""The README's install is typed for a team's own code: after it, mypy (strict) finds
scrapefleet, and an action's signature survives ``@register``.

setuptools' default ("lenient") editable install maps the folders (common/, producer/, ...) to
scrapefleet.* with an import hook that mypy cannot follow: `import-not-found`, and every action
untyped. The strict mode installs a tree of links that any tool reads. The install command is
taken from the README itself, so the page cannot drift from what is tested. Offline:
dependencies come from build/wheelhouse (made by .ci/install-ansible.sh); the checkout is copied
so that the strict tree of links of this checkout's own install is left alone."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import scaled

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / "build" / "wheelhouse"

TEAM_MODULE = """
from pydantic import BaseModel

from scrapefleet.common.api import register


class Params(BaseModel):
    url: str


@register("team_price", Params)
def price(params: Params) -> dict[str, str]:
    return {"url": params.url}


reveal_type(price)
wrong: int = price(Params(url="x"))
"""


def readme_install() -> list[str]:
    """The README's first `pip install -e` command, as argv after `.venv/bin/pip`."""
    found = re.search(r"\.venv/bin/pip (install -e [^&\n]+)", (REPO / "README.md").read_text())
    assert found, "the README has no `.venv/bin/pip install -e ...` command"
    return shlex.split(found.group(1).strip())


def _run(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPEFLEET_", "PYTHON"))}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(timeout_s)
    )


def test_the_readme_install_lets_mypy_check_a_teams_actions(tmp_path: Path) -> None:
    if not WHEELHOUSE.is_dir():
        pytest.skip(f"{WHEELHOUSE} is missing: run .ci/install-ansible.sh (it builds the wheels)")
    checkout = tmp_path / "checkout"
    shutil.copytree(
        REPO, checkout, ignore=shutil.ignore_patterns(".venv", "build", ".git", "*cache*", "site")
    )
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120).returncode == 0
    offline = ["--quiet", "--no-index", "--find-links", str(WHEELHOUSE)]
    installed = _run(
        [str(venv / "bin" / "pip"), *readme_install(), *offline], cwd=checkout, timeout_s=400
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    team = tmp_path / "team"
    team.mkdir()
    (team / "team_scrapers.py").write_text(TEAM_MODULE)
    checked = _run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", str(venv / "bin" / "python"), "team_scrapers.py"],
        cwd=team, timeout_s=180,
    )  # fmt: skip
    out = checked.stdout
    assert "import-not-found" not in out and "untyped-decorator" not in out, out
    assert 'Revealed type is "def (params: team_scrapers.Params) -> dict[str, str]"' in out, out
    assert 'expression has type "dict[str, str]", variable has type "int"' in out, out
