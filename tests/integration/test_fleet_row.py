"""The producers' own rows against real PostgreSQL: the store's writes, the producer writing its
row as it leads, stands by and stops, the ``fleet`` view agreeing with the Python decision, and
webhooks that wait on a producer without a secret shown as such everywhere."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import PRODUCER_STALE_MIN_S
from scrapefleet.common.ops.cli import cli
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.reads.producer_status import NO_SECRET, ProducerStatus, read_producer_status
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import NewJob, ProducerIdentity
from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import add_hosts, producer_settings, publish_status, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def identity(name: str, *, secret: bool = True, interval_s: float = 2.0) -> ProducerIdentity:
    return ProducerIdentity(name, "host-a", 4242, "9.9.9", interval_s, secret)


def producer_rows(engine: Engine) -> dict[str, dict[str, object]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM producers"))
        return {r.name: dict(r._mapping) for r in rows}


def age(engine: Engine, name: str, column: str, seconds: float) -> None:
    """Make a row look as if written ``seconds`` ago (what a producer that died leaves)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"UPDATE producers SET {column} = now() - make_interval(secs => :s)"
                " WHERE name = :name"
            ),
            {"s": seconds, "name": name},
        )


def status(engine: Engine) -> ProducerStatus:
    with engine.connect() as conn:
        return read_producer_status(conn)


def view(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT * FROM fleet")).one()._mapping)


# ---------------------------------------------------------------- the store


def test_register_cycle_try_stop_and_prune(engine: Engine) -> None:
    with engine.begin() as conn:
        store.register_producer(conn, identity("a"))
        store.register_producer(conn, identity("b"))
    rows = producer_rows(engine)
    assert {r["role"] for r in rows.values()} == {"standby"}
    assert rows["a"]["last_cycle_at"] is None and rows["a"]["version"] == "9.9.9"

    with engine.begin() as conn:
        store.record_leader_cycle(conn, identity("a"), None)
    with engine.begin() as conn:
        store.record_leader_cycle(conn, identity("a"), 0.25)
        store.record_standby_try(conn, identity("b"))
    rows = producer_rows(engine)
    assert rows["a"]["role"] == "leader" and rows["a"]["last_cycle_duration_s"] == 0.25
    assert rows["a"]["last_cycle_at"] is not None and rows["b"]["role"] == "standby"

    # A restarted process under the same name starts afresh.
    with engine.begin() as conn:
        store.register_producer(conn, identity("a"))
    assert producer_rows(engine)["a"]["last_cycle_at"] is None

    with engine.begin() as conn:
        store.record_producer_stopped(conn, "b")
    assert producer_rows(engine)["b"]["role"] == "stopped"

    age(engine, "b", "last_seen_at", 3600)
    with engine.begin() as conn:
        assert store.prune_producers(conn, 600) == 1
    assert set(producer_rows(engine)) == {"a"}


def test_never_seen_is_down_in_python_and_in_the_view(engine: Engine) -> None:
    assert not status(engine).up and status(engine).leader is None
    row = view(engine)
    assert row["producer_up"] is False and row["leader"] is None
    assert row["standbys_up"] == 0 and row["assignment_paused"] is False


@pytest.mark.parametrize(
    ("interval_s", "cycle_age_s", "up"),
    [
        (0.3, PRODUCER_STALE_MIN_S - 2, True),  # the floor holds a fast producer up
        (0.3, PRODUCER_STALE_MIN_S + 2, False),
        (10.0, 25.0, True),  # three of its own intervals
        (10.0, 35.0, False),
    ],
)
def test_the_view_and_the_python_decision_agree(
    engine: Engine, interval_s: float, cycle_age_s: float, up: bool
) -> None:
    with engine.begin() as conn:
        store.record_leader_cycle(conn, identity("a", interval_s=interval_s), 0.01)
        store.record_standby_try(conn, identity("b", interval_s=interval_s))
    age(engine, "a", "last_cycle_at", cycle_age_s)
    age(engine, "b", "last_seen_at", cycle_age_s)
    got = status(engine)
    assert got.up is up
    assert [s.up for s in got.standbys] == [up]
    assert got.down_since is (None if up else got.leader.last_cycle_at)  # type: ignore[union-attr]
    row = view(engine)
    assert row["producer_up"] is up and row["standbys_up"] == (1 if up else 0)
    assert row["leader"] == "a" and row["leader_pid"] == 4242


def test_the_view_shows_the_pause_switch(engine: Engine) -> None:
    with engine.begin() as conn:
        store.set_assignment_paused(conn, True, "cli", "db maintenance")
    row = view(engine)
    assert row["assignment_paused"] is True and row["pause_reason"] == "db maintenance"
    got = status(engine)
    assert got.paused and got.pause_changed_by == "cli"


# ---------------------------------------------------------------- the producer writes it


def test_leader_and_standby_write_their_rows_and_a_stop_is_seen_at_once(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    add_hosts(engine, {"h1": 2})
    publish_status(tmp_path, "h1")
    settings = producer_settings(database_url, tmp_path)
    first = Producer(settings, engine, name="first")
    second = Producer(settings, engine, name="second")
    try:
        assert first.run_cycle().leader
        assert not second.run_cycle().leader
        got = status(engine)
        assert got.up and got.leader is not None and got.leader.name == "first"
        assert got.leader.interval_s == settings.producer_interval_s
        assert [(s.row.name, s.up) for s in got.standbys] == [("second", True)]
        cycle_at = got.leader.last_cycle_at

        # A wake cycle is the hot path: it writes no row.
        submit(engine, [NewJob("noop")])
        assert first.run_cycle(full=False).assigned == 1
        assert status(engine).leader.last_cycle_at == cycle_at  # type: ignore[union-attr]
        # The next full cycle stamps it, with the duration of the one before.
        assert first.run_cycle().leader
        leader = status(engine).leader
        assert leader is not None and leader.last_cycle_at is not None
        assert leader.last_cycle_at > cycle_at  # type: ignore[operator]
        assert leader.last_cycle_duration_s is not None and leader.last_cycle_duration_s > 0

        first.close()
        got = status(engine)
        assert not got.up and "stopped" in got.headline()

        assert second.run_cycle().leader  # the standby takes over
        got = status(engine)
        assert got.up and got.leader is not None and got.leader.name == "second"
        assert got.standbys == ()
    finally:
        first.close()
        second.close()


def test_paused_leader_still_cycles_and_is_up(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        store.set_assignment_paused(conn, True, "test", "upgrade")
    producer = Producer(producer_settings(database_url, tmp_path), engine, name="p")
    try:
        assert producer.run_cycle().assigned == 0
        got = status(engine)
        assert got.up and got.paused and got.pause_reason == "upgrade"
    finally:
        producer.close()


# ---------------------------------------------------------------- webhooks without a secret


def _finished_job_with_callback(engine: Engine) -> int:
    [job_id] = submit(engine, [NewJob("noop", callback_url="https://hooks.example/x")])
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET status = 'completed', finished_at = now() WHERE id = :id"),
            {"id": job_id},
        )
    return job_id


def test_a_delivery_waiting_on_a_producer_without_a_secret_says_so_everywhere(
    engine: Engine, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = _finished_job_with_callback(engine)
    caplog.set_level(logging.INFO, logger="scrapefleet.producer")
    settings = producer_settings(database_url, tmp_path, webhook_secret=None)
    producer = Producer(settings, engine, name="no-secret")
    assert producer.run_cycle().leader
    producer.start()
    producer.stop()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("webhook_secret is not set: 1 webhook deliveries queued" in m for m in warned)
    # Its row, which stays after it stopped, says it has no secret.
    assert producer_rows(engine)["no-secret"]["webhook_secret_set"] is False

    dashboard = create_app(load_settings(None, database_url=database_url), engine).test_client()
    page = dashboard.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert 'class="webhook-blocked"' in page and NO_SECRET in page
    overview = dashboard.get("/").get_data(as_text=True)
    assert 'id="webhooks-blocked"' in overview

    env = {"SCRAPEFLEET_DATABASE_URL": database_url}
    shown = CliRunner().invoke(cli, ["jobs", "show", str(job_id)], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"completed -> https://hooks.example/x: {NO_SECRET}" in shown.output
    assert "attempts 0" not in shown.output
    text = CliRunner().invoke(cli, ["status"], env=env)
    assert f"webhooks: 1 deliveries waiting, {NO_SECRET}" in text.output

    # A producer with a secret takes over: the attempts tell the truth again.
    with engine.begin() as conn:
        store.record_leader_cycle(conn, identity("with-secret", secret=True), 0.01)
    page = dashboard.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert NO_SECRET not in page
    shown = CliRunner().invoke(cli, ["jobs", "show", str(job_id)], env=env)
    assert "completed -> https://hooks.example/x: attempts 0, next attempt" in shown.output


def test_a_producer_without_callbacks_is_not_nagged(
    engine: Engine, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scrapefleet.producer")
    producer = Producer(producer_settings(database_url, tmp_path), engine, name="quiet")
    producer.start()
    producer.stop()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, "webhook_secret is not set: webhooks are off") in messages
    assert not any(
        level == logging.WARNING and "webhook_secret" in text for level, text in messages
    )
