"""The README's first command: the demo on an embedded PostgreSQL, with no database set up."""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_demo_runs_end_to_end_on_embedded_postgres() -> None:
    done = run_cli(["demo", "--jobs", "60"], database_url=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting an embedded PostgreSQL" in done.stdout
    assert re.search(r"60 of 60 jobs finished", done.stdout), done.stdout
    # /broken/ pages fail for good; /flaky/ ones are retried and complete.
    assert "failed job" in done.stdout and "HTTP 500" in done.stdout
    assert "SELECT * FROM job_status_counts" in done.stdout
    counts = re.search(r"completed (\d+)\s+failed (\d+)", done.stdout)
    assert counts and int(counts[1]) + int(counts[2]) == 60
