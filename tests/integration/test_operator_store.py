"""An operator's retry and cancel against real PostgreSQL: what they move, and the reads that
count a command before it runs and explain one that moved nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops import bulk
from scrapefleet.common.reads import queries
from scrapefleet.common.store import HostSpec, JobFilter, NewJob

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _jobs_in(
    engine: Engine, statuses: list[str], kind: str = "noop", host: str = "h1"
) -> list[int]:
    """One job per entry of ``statuses``, put there by hand (the store's own moves are
    exercised in test_store.py)."""
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob(kind) for _ in statuses], default_max_attempts=3).ids
        for job_id, status in zip(ids, statuses, strict=True):
            conn.execute(
                sa.text("UPDATE jobs SET status = :s, host = :h WHERE id = :id"),
                {"s": status, "h": None if status == "pending" else host, "id": job_id},
            )
    return ids


def _statuses(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, status FROM jobs ORDER BY id")).all())


def test_retry_moves_failed_jobs_only_unless_cancelled_ones_are_asked_for(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=2))
    failed, cancelled, completed = _jobs_in(engine, ["failed", "cancelled", "completed"])
    with engine.begin() as conn:
        assert store.retry_jobs(conn, JobFilter(kind="noop")) == [failed]
        assert store.retry_jobs(conn, JobFilter(kind="noop")) == []
        assert store.retry_jobs(conn, JobFilter(kind="noop"), include_cancelled=True) == [cancelled]
    assert _statuses(engine) == {failed: "pending", cancelled: "pending", completed: "completed"}


def test_counts_before_acting_match_what_the_command_then_moves(engine: Engine) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=2))
    ids = _jobs_in(engine, ["pending", "queued", "processing", "failed", "cancelled"])
    which = JobFilter(host="h1")
    with engine.connect() as conn:
        by_status = queries.jobs_matching_by_status(conn, which)
        assert by_status == {"queued": 1, "processing": 1, "failed": 1, "cancelled": 1}
        assert queries.jobs_matching_by_status(conn, JobFilter(kind="noop"))["pending"] == 1
        assert queries.jobs_matching_by_status(conn, JobFilter(ids=[ids[0], 999])) == {"pending": 1}
        assert queries.host_exists(conn, "h1") and not queries.host_exists(conn, "nosuch")
    counted = bulk.would_move(by_status, bulk.movable(bulk.CANCEL))
    with engine.begin() as conn:
        assert len(store.cancel_jobs(conn, which)) == counted == 1


def test_a_running_job_is_not_cancelled_and_the_reason_is_its_status(engine: Engine) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=2))
    [running] = _jobs_in(engine, ["processing"])
    with engine.begin() as conn:
        assert store.cancel_jobs(conn, JobFilter(ids=[running])) == []
        found = queries.job_statuses(conn, [running, 424242])
    line = bulk.unmoved_ids(bulk.CANCEL, [running, 424242], [], found)
    assert line == (
        f"2 of 2 job(s) not cancelled: job {running} is processing; job 424242 does not exist"
        " (only pending or queued jobs are cancelled; `jobs stop` ends a running one)"
    )
