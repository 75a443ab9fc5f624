"""A command run against a database that was never migrated (or is behind the package) says so
in one line and names the command that fixes it, instead of printing a driver traceback."""

from __future__ import annotations

import psycopg
import pytest

from scrapefleet.common.db.engines import libpq_url
from tests.cli_helpers import run_cli
from tests.throwaway_db import throwaway_database

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("args", [["status"], ["jobs", "list"], ["results", "export"]])
def test_an_unmigrated_database_asks_for_db_upgrade(args: list[str]) -> None:
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_unmigrated") as url:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        answer = run_cli(args, url)
    assert answer.returncode != 0
    assert "Traceback" not in answer.stderr, answer.stderr
    (line,) = answer.stderr.strip().splitlines()
    assert "does not exist" in line and "run `scrapefleet db upgrade`" in line
