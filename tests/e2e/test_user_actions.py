"""User actions named by a dotted path in settings: validated at submit, run by consumers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec
from tests.cli_helpers import BIN, run_cli
from tests.waiting import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

USER_MODULE = """
from pydantic import BaseModel
from scrapefleet.common.actions.registry import register

class PriceParams(BaseModel):
    sku: str
    quantity: int = 1

@register("prices", PriceParams)
def prices(params):
    return {"sku": params.sku, "total": 2 * params.quantity}

def shout(params):  # undecorated: registered under its name, free-form params
    return {"said": str(params.model_dump().get("text", "")).upper()}
"""


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scrapers.py").write_text(USER_MODULE)
    return {
        "PYTHONPATH": str(tmp_path),
        "SCRAPEFLEET_ACTIONS": json.dumps(["mypkg.scrapers:prices", "mypkg.scrapers:shout"]),
    }


def test_user_actions_validate_at_submit_and_run_on_a_consumer(
    engine: Engine, database_url: str, user_env: dict[str, str], tmp_path: Path
) -> None:
    bad = run_cli(
        ["submit", "-"], database_url, stdin='{"kind": "prices", "payload": {}}\n', **user_env
    )
    assert bad.returncode == 2 and "line 1: payload.sku: Field required" in bad.stderr

    lines = (
        '{"kind": "prices", "payload": {"sku": "A-1", "quantity": 3}}\n'
        '{"kind": "shout", "payload": {"text": "hi"}}\n'
    )
    good = run_cli(["submit", "-"], database_url, stdin=lines, **user_env)
    assert good.returncode == 0, good.stderr

    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="u1", capacity=2))
    env = {
        **user_env,
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
        "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    }
    with LocalFleet(database_url, tmp_path / "state", ["u1"], env=env):
        deadline = time.monotonic() + 30
        while True:
            with engine.connect() as conn:
                results = (
                    conn.execute(
                        sa.text("SELECT result FROM jobs WHERE status = 'completed' ORDER BY id")
                    )
                    .scalars()
                    .all()
                )
            if len(results) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert results == [{"sku": "A-1", "total": 6}, {"said": "HI"}]


def test_a_bad_action_path_is_a_settings_error(database_url: str) -> None:
    done = run_cli(["submit", "-"], database_url, stdin="", SCRAPEFLEET_ACTIONS='["nosuchmod:f"]')
    assert done.returncode == 2
    assert "invalid setting actions: cannot import 'nosuchmod': ModuleNotFoundError" in done.stderr


def test_a_consumer_whose_action_module_does_not_import_stops_with_one_line(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "team_broken.py").write_text("import no_such_dependency\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")},
        "PYTHONPATH": str(tmp_path),
        "SCRAPEFLEET_DATABASE_URL": database_url,
        "SCRAPEFLEET_STATE_DIR": str(tmp_path / "state"),
        "SCRAPEFLEET_BROWSER": "false",
        "SCRAPEFLEET_ACTIONS": "team_broken",
    }
    done = subprocess.run(
        [str(BIN / "scrapefleet-consumer"), "run", "--host", "u1", "--register", "--until-idle"],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "scrapefleet-consumer: invalid setting actions: cannot import 'team_broken':"
        " ModuleNotFoundError: No module named 'no_such_dependency'\n"
    )
