"""A job pinned to a host (submit --host) runs there or nowhere: handed back by that host, it
waits pending for it (with the reason in its history), while the producer's real cycles give
the other host every job nobody pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.status.document import write_status
from scrapefleet.common.store import NewJob
from tests.host_status_factory import status_for
from tests.integration.producer_helpers import add_hosts, publish_status, statuses, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_a_pinned_job_its_host_hands_back_never_runs_elsewhere(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    add_hosts(engine, {"h1": 6, "h2": 6})
    publish_status(tmp_path, "h1")
    # h2 is active, but its browser stack failed: it takes no browser job.
    write_status(tmp_path, status_for("h2", browser="failing", browser_reason="no display"))
    (pinned,) = submit(engine, [NewJob("fetch_page", {"url": "http://a.test/"},
                                       needs_browser=True)])  # fmt: skip
    with engine.begin() as conn:
        assert store.pin_jobs_to_host(conn, [pinned], "h2") == [pinned]
        # What h2's consumer does with a browser job it cannot run: hands it back.
        assert store.requeue_host_browser_jobs(conn, "h2", "browser stack failing") == [pinned]
    free = submit(engine, [NewJob("noop")])
    producer = make_producer()

    producer.run_cycle()
    producer.run_cycle()
    jobs = statuses(engine)
    assert jobs[pinned] == ("pending", None), jobs  # h1 was idle and took browser jobs
    assert jobs[free[0]] == ("queued", "h1")

    # Drained by an operator, h2 still owns the pin: the job waits.
    with engine.begin() as conn:
        store.drain_host(conn, "h2")
    producer.run_cycle()
    assert statuses(engine)[pinned] == ("pending", None)

    # Back at work with its stack up: the job goes to h2, the host it was pinned to.
    with engine.begin() as conn:
        store.set_host_state(conn, "h2", "active", "test: back at work")
    publish_status(tmp_path, "h2")
    producer.run_cycle()
    assert statuses(engine)[pinned] == ("queued", "h2")
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT pinned_host FROM jobs WHERE id = :id"), {"id": pinned}
        ).one()
    assert row.pinned_host == "h2"
