"""A job that completes keeps no error: ``last_error`` said "interrupted ..." or "rescued ..."
on completed jobs, read as a failure; the history stays in job_events."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec, NewJob

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("many", [False, True], ids=["complete_job", "complete_jobs"])
def test_completion_clears_last_error_and_keeps_the_history(engine: Engine, many: bool) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
        [job_id] = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3).ids
        store.assign_jobs(conn, [(job_id, "h1")])
        [claimed] = store.claim_jobs(conn, "h1", 1).jobs
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at = now() - interval '10 minutes' WHERE id = :id"),
            {"id": job_id},
        )
        assert store.rescue_stale_processing(conn, 60) == [job_id]
        assert (
            conn.execute(sa.text("SELECT last_error FROM jobs WHERE id = :id"), {"id": job_id})
            .scalar_one()
            .startswith("rescued")
        )
        store.assign_jobs(conn, [(job_id, "h1")])
        [again] = store.claim_jobs(conn, "h1", 1).jobs
        if many:
            store.complete_jobs(conn, "h1", [(job_id, again.claim, {"ok": 1})])
        else:
            store.complete_job(conn, "h1", job_id, again.claim, {"ok": 1})
        row = conn.execute(
            sa.text("SELECT status, last_error FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()
        messages = (
            conn.execute(
                sa.text("SELECT message FROM job_events WHERE job_id = :id ORDER BY id"),
                {"id": job_id},
            )
            .scalars()
            .all()
        )
    assert tuple(row) == ("completed", None)
    assert any(m and m.startswith("rescued") for m in messages)
    assert claimed.id == job_id
