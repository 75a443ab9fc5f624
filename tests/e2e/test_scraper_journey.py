"""A team's week, as docs/scrapers.md walks it: a package whose action arrives through its
scrapefleet.actions entry point (no `actions` setting), tried locally, submitted, scheduled,
fired by one of two producers, run by a consumer daemon, its results exported."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.store import HostSpec, add_host
from tests.cli_helpers import run_cli
from tests.waiting import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TEAM_MODULE = """
from pydantic import BaseModel
from scrapefleet.common.api import register

class GreetParams(BaseModel):
    name: str

@register("greet", GreetParams, max_attempts=2, priority=5)
def greet(params):
    return {"greeting": f"hello {params.name}"}
"""


@pytest.fixture
def installed_package(tmp_path: Path) -> dict[str, str]:
    """team-scrapers as pip installs it: its module and a dist-info with the entry point."""
    site = tmp_path / "site"
    (site / "team_scrapers").mkdir(parents=True)
    (site / "team_scrapers" / "__init__.py").write_text("")
    (site / "team_scrapers" / "greet.py").write_text(TEAM_MODULE)
    dist_info = site / "team_scrapers-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: team-scrapers\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "[scrapefleet.actions]\nteam = team_scrapers.greet\n"
    )
    return {"PYTHONPATH": str(site)}


def test_write_try_submit_schedule_run_and_export(
    engine: Engine, database_url: str, installed_package: dict[str, str], tmp_path: Path
) -> None:
    env = installed_package
    tried = run_cli(["try", "greet", '{"name": "Ada"}'], None, **env)
    assert tried.returncode == 0, tried.stderr
    assert json.loads(tried.stdout[: tried.stdout.rindex("}") + 1])["result"] == {
        "greeting": "hello Ada"
    }

    submitted = run_cli(
        ["submit", "-"], database_url, stdin='{"kind": "greet", "payload": {"name": "Bo"}}\n', **env
    )
    assert submitted.returncode == 0, submitted.stderr
    job = tmp_path / "greet.json"
    job.write_text(json.dumps({"kind": "greet", "payload": {"name": "Cy"}}))
    added = run_cli(
        ["schedules", "add", "greet-daily", "--cron", "0 7 * * *", "--job", str(job)],
        database_url,
        **env,
    )
    assert added.returncode == 0, added.stderr
    with engine.begin() as conn:
        # The morning has come: its slot is due now.
        conn.execute(sa.text("UPDATE schedule_defs SET next_run_at = now() - interval '1 second'"))
        add_host(conn, HostSpec(name="c1", capacity=2))
        defaults = conn.execute(sa.text("SELECT DISTINCT priority, max_attempts FROM jobs")).all()
    assert [tuple(row) for row in defaults] == [(5, 2)]  # the action's own defaults

    fleet_env = {
        **env,
        "SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.3",
        "SCRAPEFLEET_CONSUMER_POLL_S": "0.3",
    }
    with LocalFleet(database_url, tmp_path / "state", ["c1"], env=fleet_env, producers=2):
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                done = conn.execute(
                    sa.text("SELECT count(*) FROM jobs WHERE status = 'completed'")
                ).scalar()
            if done == 2:
                break
            time.sleep(0.2)
    assert done == 2

    shown = json.loads(run_cli(["schedules", "show", "greet-daily"], database_url).stdout)
    assert (shown["last_outcome"], shown["last_jobs"], shown["last_completed"]) == ("fired", 1, 1)
    exported = run_cli(
        ["results", "export", "--kind", "greet", "--format", "csv"], database_url, **env
    )
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    greetings = sorted(json.loads(row["result"])["greeting"] for row in rows)
    assert greetings == ["hello Bo", "hello Cy"]
