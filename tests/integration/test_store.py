"""The job and host state machine, statement by statement, against real PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import queries, store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.store import HostSpec, JobFilter, NewJob

pytestmark = pytest.mark.integration


def _setup_host(engine: Engine, name: str = "h1", capacity: int = 6) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name=name, capacity=capacity))


def _statuses(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, status FROM jobs ORDER BY id")).all())


def test_insert_skips_unfinished_dedupe_keys(engine: Engine) -> None:
    with engine.begin() as conn:
        first = store.insert_jobs(
            conn,
            [NewJob("noop", dedupe_key="a"), NewJob("noop", dedupe_key="a"), NewJob("noop")],
            default_max_attempts=3,
        )
        again = store.insert_jobs(conn, [NewJob("noop", dedupe_key="a")], default_max_attempts=3)
    assert len(first.ids) == 2 and first.skipped_duplicates == 1
    assert again.ids == [] and again.skipped_duplicates == 1


def test_full_flow_is_audited(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3).ids
        pending = store.lock_pending_jobs(conn, 10)
        assert [p.id for p in pending] == [job_id]
        assert store.assign_jobs(conn, [(job_id, "h1")]) == [(job_id, "h1")]
    with engine.begin() as conn:
        claim = store.claim_jobs(conn, "h1", 6)
    assert [j.id for j in claim.jobs] == [job_id] and claim.jobs[0].attempt == 1
    assert claim.jobs_since_restart == 0  # the browser budgets count browser jobs only
    with engine.begin() as conn:
        assert store.complete_job(conn, "h1", job_id, 1, {"ok": True})
        # A second completion of the same attempt cannot happen.
        assert not store.complete_job(conn, "h1", job_id, 1, {"ok": True})
        events = queries.job_events(conn, job_id)
    assert [(e["from_status"], e["to_status"]) for e in events] == [
        (None, "pending"),
        ("pending", "queued"),
        ("queued", "processing"),
        ("processing", "completed"),
    ]


def test_failed_attempt_retries_then_fails(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob("noop", max_attempts=2)], default_max_attempts=3
        ).ids
    for attempt, retry_at, expected in (
        (1, utcnow() - timedelta(seconds=1), "pending"),
        (2, None, "failed"),
    ):
        with engine.begin() as conn:
            store.assign_jobs(conn, [(job_id, "h1")])
            assert store.claim_jobs(conn, "h1", 6).jobs[0].attempt == attempt
            status = store.fail_attempt(
                conn, "h1", job_id, attempt, "Traceback...\nRuntimeError: boom\n", retry_at=retry_at
            )
        assert status == expected
    with engine.connect() as conn:
        events = queries.job_events(conn, job_id)
    assert events[-1]["to_status"] == "failed" and events[-1]["message"] == "RuntimeError: boom"


def test_lock_key_cannot_be_in_flight_twice(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        ids = store.insert_jobs(
            conn,
            [NewJob("noop", lock_key="acct-1"), NewJob("noop", lock_key="acct-1")],
            default_max_attempts=3,
        ).ids
        store.assign_jobs(conn, [(ids[0], "h1")])
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        store.assign_jobs(conn, [(ids[1], "h1")])


def test_recover_and_rescue(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        ids = store.insert_jobs(
            conn,
            [NewJob("noop", max_attempts=1), NewJob("noop", max_attempts=2)],
            default_max_attempts=3,
        ).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
        store.claim_jobs(conn, "h1", 6)
    with engine.begin() as conn:
        assert store.rescue_stale_processing(conn, 60) == []  # still heartbeating
        conn.execute(sa.text("UPDATE jobs SET heartbeat_at = now() - interval '2 minutes'"))
    with engine.begin() as conn:
        assert sorted(store.rescue_stale_processing(conn, 60)) == ids
    # A rescue is a release: the attempt is given back, even a job's last one.
    assert _statuses(engine) == {ids[0]: "pending", ids[1]: "pending"}
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT attempts, releases FROM jobs ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [(0, 1), (0, 1)]


def test_operator_cancel_retry_drain(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        ids = store.insert_jobs(
            conn, [NewJob("noop"), NewJob("noop"), NewJob("http_get")], default_max_attempts=3
        ).ids
        store.assign_jobs(conn, [(ids[0], "h1")])
        assert store.drain_host(conn, "h1") == [ids[0]]
        assert store.cancel_jobs(conn, JobFilter(kind="noop")) == ids[:2]
        assert store.retry_jobs(conn, JobFilter(ids=[ids[0]])) == [ids[0]]
        with pytest.raises(Exception, match="refusing"):
            store.cancel_jobs(conn, JobFilter())
        state = conn.execute(sa.text("SELECT state FROM hosts WHERE name='h1'")).scalar()
    assert state == "draining"
    assert _statuses(engine) == {ids[0]: "pending", ids[1]: "cancelled", ids[2]: "pending"}


def test_register_consumer_resets_since_boot_on_new_boot_id(engine: Engine) -> None:
    with engine.begin() as conn:
        reg = store.register_consumer(conn, "h9", 4, "boot-a")
        assert (reg.capacity, reg.state) == (4, "active")
        conn.execute(sa.text("UPDATE hosts SET jobs_since_boot = 7, jobs_since_restart = 3"))
        assert store.register_consumer(conn, "h9", 4, "boot-a").jobs_since_boot == 7
        assert store.register_consumer(conn, "h9", 4, "boot-b").jobs_since_boot == 0


def test_releases_never_use_attempts_and_have_their_own_bound(engine: Engine) -> None:
    """A job that takes every host's browser down cannot bounce between hosts forever, and
    its host's failures never spend its own attempts."""
    from scrapefleet.common.constants import MAX_RELEASES_PER_JOB

    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob("noop", max_attempts=2)], default_max_attempts=3
        ).ids
    outcomes = []
    for _ in range(MAX_RELEASES_PER_JOB + 1):
        with engine.begin() as conn:
            store.assign_jobs(conn, [(job_id, "h1")])
            attempt = store.claim_jobs(conn, "h1", 6).jobs[0].attempt
            assert attempt == 1
            assert store.release_job(conn, "h1", job_id, attempt, "stack down")
            outcomes.append(
                conn.execute(
                    sa.text("SELECT status, attempts, releases FROM jobs WHERE id = :id"),
                    {"id": job_id},
                ).one()
            )
    pending = [("pending", 0, n + 1) for n in range(MAX_RELEASES_PER_JOB)]
    assert outcomes == [*pending, ("failed", 0, MAX_RELEASES_PER_JOB + 1)]
    with engine.connect() as conn:
        error = conn.execute(sa.text("SELECT last_error FROM jobs")).scalar_one()
    assert error == f"stack down (released {MAX_RELEASES_PER_JOB + 1} times)"


def test_claims_count_browser_jobs_and_respect_their_own_limit(engine: Engine) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        jobs = [NewJob("fetch_page", {"url": "http://x/"}, needs_browser=True)] * 3
        batch = [*jobs, NewJob("noop"), NewJob("noop")]
        ids = store.insert_jobs(conn, batch, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
    with engine.begin() as conn:
        claim = store.claim_jobs(conn, "h1", 4, browser_limit=1)
    assert sorted(j.id for j in claim.jobs) == [ids[0], ids[3], ids[4]]
    assert [j.needs_browser for j in claim.jobs] == [True, False, False]
    assert (claim.jobs_since_restart, claim.jobs_since_boot) == (1, 1)
    with engine.begin() as conn:  # no browser budget left: the plain limit alone
        assert store.claim_jobs(conn, "h1", 4, browser_limit=0).jobs == []
        claim = store.claim_jobs(conn, "h1", 1)
    assert [j.id for j in claim.jobs] == [ids[1]] and claim.jobs_since_restart == 2
