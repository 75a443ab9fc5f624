"""`scrapefleet submit --host NAME`: jobs queued on that host at once (a deploy's canary), as
real subprocesses against real PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec
from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CANARY = '{"kind": "noop", "payload": {}}\n'


def test_pinned_jobs_are_queued_on_their_host_with_their_ids_printed(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
        store.add_host(conn, HostSpec(name="h2", capacity=6))
    done = run_cli(["submit", "--host", "h2", "-"], database_url, stdin=CANARY * 2)
    assert done.returncode == 0, done.stderr
    ids = [int(i) for i in done.stdout.splitlines()[-1].removeprefix("pinned to host h2: ").split()]
    assert len(ids) == 2, done.stdout
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT status, host, queued_at IS NOT NULL AS q FROM jobs WHERE id = ANY(:i)"),
            {"i": ids},
        ).all()
        events = conn.execute(
            sa.text("SELECT to_status, message FROM job_events WHERE job_id = :i ORDER BY id"),
            {"i": ids[0]},
        ).all()
    assert {tuple(r) for r in rows} == {("queued", "h2", True)}
    assert [tuple(e) for e in events] == [
        ("pending", None),
        ("queued", "pinned to host h2 at submit"),
    ]


def test_a_pin_to_an_unknown_host_is_one_line_and_inserts_nothing(
    engine: Engine, database_url: str
) -> None:
    done = run_cli(["submit", "--host", "nosuch", "-"], database_url, stdin=CANARY)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "error: no host named 'nosuch'", done.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 0


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"kind": "noop", "lock_key": "acct-1"}', "lock_key 'acct-1'"),
        (
            '{"kind": "fetch_page", "payload": {"url": "http://127.0.0.1:9/",'
            ' "browser": {"profile": "acct-7"}}}',
            "a browser profile",
        ),
    ],
)
def test_a_pin_refuses_what_only_the_planner_guarantees(
    engine: Engine, database_url: str, line: str, named: str
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
    done = run_cli(["submit", "--host", "h1", "-"], database_url, stdin=CANARY + line + "\n")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: job 2: a job pinned to a host cannot have") and named in last
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one() == 0
