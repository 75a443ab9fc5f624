"""Shared fixtures: a real PostgreSQL database per test session, emptied between tests.

The server is SCRAPEFLEET_TEST_DATABASE_URL, else the one at 127.0.0.1:5432, else an embedded
pgserver. Each pytest process creates its own database (so parallel runs never collide),
migrates it with Alembic, and drops it at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.db.engines import make_engine
from tests.cli_helpers import LOOPBACK_ALLOWED
from tests.throwaway_db import throwaway_database
from tests.waiting import SLOWNESS, scaled

# The sites tests serve are on loopback, which a consumer's HTTP jobs may not reach unless
# allowed (common.http.egress): allowed here, for this process and every consumer it starts with
# its environment (tests.cli_helpers.scrubbed_env keeps it). Tests of the rule set their own.
os.environ.setdefault(LOOPBACK_ALLOWED[0], LOOPBACK_ALLOWED[1])


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A freshly created and migrated database; dropped after the session."""
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_test") as url:
        yield url


@pytest.fixture(scope="session")
def session_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=8)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(session_engine: Engine) -> Engine:
    """The session's engine over an empty database (every table truncated; fleet_control
    has no row, which reads as "not paused"; producers none, which reads as "producer down")."""
    with session_engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE jobs, hosts, job_events, host_events, jobs_archive, webhook_deliveries,"
                " fleet_control, producers, profiles, crawl_runs, crawl_seen, rate_keys,"
                " live_controls, control_changes,"
                " schedule_defs, schedule_runs, proxy_pools, proxies, proxy_credentials,"
                " identity_leases, proxy_sessions, proxy_session_jars"
                " RESTART IDENTITY"
            )
        )
    return session_engine


# On CI every prerequisite is installed by .ci/run, so a browser, fleet or Ansible test that
# skips means an install step is missing: fail it loudly instead of landing a green run that
# tested nothing of the kind.
_MUST_RUN_ON_CI = ("browser", "fleet", "ansible", "packaging")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (
        os.environ.get("CI") == "true"
        and report.skipped
        and any(item.get_closest_marker(m) for m in _MUST_RUN_ON_CI)
    ):
        report.outcome = "failed"
        report.longrepr = f"skipped on CI, where it must run: {report.longrepr}"


# The test command runs two pytest-xdist workers (pyproject's addopts), one per group below, each
# running its group's tests one after another in their usual order. The suites spend most of
# their time waiting (on playbooks over SSH, browsers, daemons), so the two share two cores
# well: the Ansible suite with the database tests, the unit tests and the checks in one, the
# browser, fleet, end-to-end and packaging tests in the other. Within a group nothing runs
# beside its neighbours: two browser stacks, or the demo's embedded PostgreSQL and the
# packaging test's, never start at once. (Four groups taken by whichever worker was free
# made a run 12 minutes longer: the database and unit tests waited behind both long groups.)
_WORKER_GROUPS = {
    "ansible": "playbooks-and-database",
    "checks": "playbooks-and-database",
    "integration": "playbooks-and-database",
    "unit": "playbooks-and-database",
    "benchmarks": "browsers-and-fleets",
    "browser": "browsers-and-fleets",
    "e2e": "browsers-and-fleets",
    "fleet": "browsers-and-fleets",
    "packaging": "browsers-and-fleets",
}


def _worker_group(item: pytest.Item) -> str:
    suite = item.path.relative_to(item.config.rootpath).parts[1]  # tests/<suite>/...
    return _WORKER_GROUPS.get(suite, "browsers-and-fleets")


@pytest.hookimpl(wrapper=True)  # around pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Each test's xdist group; every test's timeout (its marker, else the ini default) times
    SCRAPEFLEET_TEST_SLOWNESS."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_worker_group(item)))
    if SLOWNESS != 1:
        default_s = float(config.getini("timeout") or 0)
        for item in items:
            marker = item.get_closest_marker("timeout")
            base_s = float(marker.args[0]) if marker and marker.args else default_s
            if base_s:
                item.add_marker(pytest.mark.timeout(scaled(base_s)), append=False)
    return (yield)
