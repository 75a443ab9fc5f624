"""Kinds as host capabilities, with real PostgreSQL, two real consumers and a real producer:
a job of a kind only one host runs goes to that host; with that host drained it waits, and
`jobs show`, `status` and the dashboard say why in one line."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.status.document import read_status
from scrapefleet.common.store import NewJob
from tests.cli_helpers import run_cli
from tests.integration.producer_helpers import statuses, submit
from tests.integration.test_consumer import CONSUMER_BIN, consumer_env, make_settings
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PLAIN, SCRAPER = "scraper-1", "scraper-2"
WAITING = f"waiting: no active host runs kind 'prices' ({SCRAPER} is draining)"


@contextmanager
def consumer(settings: Settings, host: str, log: Path, actions: str = "[]") -> Iterator[None]:
    env = consumer_env(settings) | {
        "SCRAPEFLEET_ACTIONS": actions,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [CONSUMER_BIN, "run", "--host", host, "--register"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5)


def _hosts_of(engine: Engine, ids: list[int]) -> set[str | None]:
    jobs = statuses(engine)
    return {jobs[i][1] for i in ids}


def test_a_kind_only_one_host_runs_goes_there_and_waits_with_a_reason_while_it_is_drained(
    engine: Engine, database_url: str, tmp_path: Path, make_producer: Any
) -> None:
    # The producer's local probe reads the consumers' status files in its own state_dir.
    settings = make_settings(tmp_path, database_url, capacity=3, state_dir=tmp_path)
    producer = make_producer(probe_start_grace_s=0)
    with (
        consumer(settings, PLAIN, tmp_path / "plain.log"),
        consumer(settings, SCRAPER, tmp_path / "scraper.log", '["tests.integration.kind_actions"]'),
    ):
        for host in (PLAIN, SCRAPER):  # each has written its status, with the kinds it runs
            wait_for(lambda h=host: _kinds(settings, h) is not None, what=f"{host}'s status")
        assert "prices" in (_kinds(settings, SCRAPER) or {})
        assert "prices" not in (_kinds(settings, PLAIN) or {}) and "noop" in _kinds(settings, PLAIN)
        producer.start()
        priced = submit(engine, [NewJob("prices") for _ in range(6)])
        plain = submit(engine, [NewJob("noop", {"sleep_s": 0.05}) for _ in range(6)])
        wait_for(lambda: _all(engine, priced + plain, "completed"), what="12 jobs completed")
        assert _hosts_of(engine, priced) == {SCRAPER}  # the only host that runs the kind
        with engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT name, kinds FROM hosts ORDER BY name")).all()
        assert {r.name: "prices" in r.kinds for r in stored} == {PLAIN: False, SCRAPER: True}

        with engine.begin() as conn:
            store.drain_host(conn, SCRAPER, "maintenance")
        [waiting] = submit(engine, [NewJob("prices")])
        [other] = submit(engine, [NewJob("noop")])
        wait_for(lambda: _all(engine, [other], "completed"), what="the noop job completed")
        cycles = producer.cycles
        wait_for(lambda: producer.cycles >= cycles + 5, what="five more producer cycles")
        assert statuses(engine)[waiting] == ("pending", None)

        shown = run_cli(["jobs", "show", str(waiting)], database_url)
        assert shown.returncode == 0 and WAITING in shown.stdout, shown.stdout
        status = run_cli(["status"], database_url)
        assert f"1 job(s) {WAITING}" in status.stdout, status.stdout
        dashboard = create_app(load_settings(None, database_url=database_url), engine)
        client = dashboard.test_client()
        assert WAITING in html.unescape(client.get(f"/jobs/{waiting}").get_data(as_text=True))
        assert WAITING in html.unescape(client.get("/").get_data(as_text=True))
        host_page = client.get(f"/hosts/{SCRAPER}").get_data(as_text=True)
        shown = _kinds_shown(host_page)
        # Any team package installed beside may add kinds of its own: the list is only
        # known to hold ours and the built-ins, in order.
        assert {"prices", "screenshot"} <= set(shown) and shown == sorted(shown), host_page

        with engine.begin() as conn:
            store.enable_host(conn, SCRAPER)
        wait_for(lambda: _all(engine, [waiting], "completed"), what="the prices job completed")
        assert _hosts_of(engine, [waiting]) == {SCRAPER}


def _kinds_shown(page: str) -> list[str]:
    """The kinds the host page lists, without their versions."""
    found = re.search(r'id="kinds">(.*?)</td>', page)
    assert found is not None, page
    cell = re.sub(r'<span class="muted">[^<]*</span>', "", found.group(1))
    return [kind.strip() for kind in html.unescape(cell).split(",")]


def _kinds(settings: Settings, host: str) -> dict[str, str | None] | None:
    try:
        return read_status(settings.state_dir, host).kinds
    except Exception:
        return None


def _all(engine: Engine, ids: list[int], status: str) -> bool:
    jobs = statuses(engine)
    return all(jobs[i][0] == status for i in ids)
