"""Operator commands answer what is true: enabling an offline host is refused (its consumer
must answer the producer's probes first), and resuming a key, kind or crawl that does not
exist says so, with a non-zero exit and nothing changed."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec, NewJob
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.timeout(60)


def test_enabling_an_offline_host_is_refused_and_changes_nothing(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="c2", capacity=6))
        store.set_host_state(conn, "c2", "offline", "probe failed: connection refused")
        conn.execute(
            sa.text("UPDATE hosts SET state_changed_at = now() - interval '2 hours', "
                    "probe_failures = 7 WHERE name = 'c2'")
        )  # fmt: skip
        before = conn.execute(sa.text("SELECT why FROM sick_hosts WHERE host = 'c2'")).scalar()
    answer = run_cli(["hosts", "enable", "c2"], database_url)
    assert answer.returncode == 2, answer.stdout + answer.stderr
    assert "host c2 active" not in answer.stdout
    assert "offline" in answer.stderr and "probe" in answer.stderr
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT state, probe_failures FROM hosts WHERE name = 'c2'")
        ).one()
        after = conn.execute(sa.text("SELECT why FROM sick_hosts WHERE host = 'c2'")).scalar()
    assert tuple(row) == ("offline", 7) and after == before


def test_enabling_a_disabled_host_still_works(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="c1", capacity=6))
        store.set_host_state(conn, "c1", "disabled", "by hand")
    answer = run_cli(["hosts", "enable", "c1"], database_url)
    assert answer.returncode == 0 and "host c1 active" in answer.stdout, answer.stderr


@pytest.mark.parametrize(
    ("option", "name", "words"),
    [("--key", "no-such.example", "rate key"), ("--kind", "nosuchkind", "kind"),
     ("--crawl", "999", "crawl")],
)  # fmt: skip
def test_resuming_what_does_not_exist_says_so(
    engine: Engine, database_url: str, option: str, name: str, words: str
) -> None:
    answer = run_cli(["controls", "resume", option, name], database_url)
    assert answer.returncode == 1, answer.stdout + answer.stderr
    assert f"{words} {name} does not exist" in answer.stderr, answer.stderr
    assert "already so" not in answer.stderr


def test_resuming_a_key_that_exists_but_is_not_paused_says_that(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop", rate_key="shop.example")], default_max_attempts=3)
    answer = run_cli(["controls", "resume", "--key", "shop.example"], database_url)
    assert answer.returncode == 1
    assert "rate key shop.example is not paused: nothing changed" in answer.stderr, answer.stderr
    paused = run_cli(["controls", "pause", "--key", "shop.example"], database_url)
    assert paused.returncode == 0, paused.stderr
    resumed = run_cli(["controls", "resume", "--key", "shop.example"], database_url)
    assert resumed.returncode == 0, resumed.stderr
