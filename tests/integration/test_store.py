"""The job and host state machine, statement by statement, against real PostgreSQL.

Every test here also checks that each move its statements made, as the audit trail and
host_events record them, is a row of the store's table of allowed transitions.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.db.channels import host_channels
from scrapefleet.common.db.engines import Listener
from scrapefleet.common.errors import NotFound
from scrapefleet.common.reads import queries
from scrapefleet.common.store import HostSpec, JobFilter, NewJob
from scrapefleet.common.store.statuses import (
    ATTEMPTS_EXHAUSTED_SQL,
    TRANSITIONS,
    HostState,
    JobStatus,
    attempts_exhausted,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ALLOWED = {(t.source, t.target) for t in TRANSITIONS}


def moves_made(engine: Engine) -> set[tuple[str | None, str | None]]:
    with engine.connect() as conn:
        jobs = conn.execute(sa.text("SELECT DISTINCT from_status, to_status FROM job_events"))
        hosts = conn.execute(
            sa.text(
                "SELECT DISTINCT from_state, to_state FROM host_events"
                " WHERE event = 'state' OR (event = 'added' AND to_state IS NOT NULL)"
            )
        )
        return {(r[0], r[1]) for r in [*jobs, *hosts]}


@pytest.fixture(autouse=True)
def only_allowed_moves(engine: Engine) -> Iterator[None]:
    yield
    made = moves_made(engine)
    assert made <= ALLOWED, f"moves missing from statuses.TRANSITIONS: {made - ALLOWED}"


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
        assert store.retry_jobs(conn, JobFilter(ids=[ids[0]])) == []  # cancelled: only if asked
        assert store.retry_jobs(conn, JobFilter(ids=[ids[0]]), include_cancelled=True) == [ids[0]]
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
    """A job whose page takes every host's browser down cannot bounce between hosts forever;
    its hosts' own faults (a consumer killed, a rescue, a stack down) never fail it, and no
    release spends its own attempts."""
    from scrapefleet.common.constants import MAX_RELEASES_PER_JOB

    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob("noop", max_attempts=2)], default_max_attempts=3
        ).ids

    def release(**how: bool) -> tuple[object, ...]:
        with engine.begin() as conn:
            store.assign_jobs(conn, [(job_id, "h1")])
            claimed = store.claim_jobs(conn, "h1", 6).jobs[0]
            assert claimed.attempt == 1  # a release gives the attempt back, never the claim
            assert store.release_job(conn, "h1", job_id, claimed.claim, "stack down", **how)
            return conn.execute(
                sa.text(
                    "SELECT status, attempts, releases, page_releases FROM jobs WHERE id = :id"
                ),
                {"id": job_id},
            ).one()

    # The host's faults, many more than the bound: the job is never failed for them.
    host_faults = MAX_RELEASES_PER_JOB * 2
    assert [release() for _ in range(host_faults)][-1] == ("pending", 0, host_faults, 0)
    # Its page's: MAX_RELEASES_PER_JOB are given back, the next one fails it.
    outcomes = [release(by_page=True) for _ in range(MAX_RELEASES_PER_JOB + 1)]
    pending = [("pending", 0, host_faults + n + 1, n + 1) for n in range(MAX_RELEASES_PER_JOB)]
    last = ("failed", 0, host_faults + MAX_RELEASES_PER_JOB + 1, MAX_RELEASES_PER_JOB + 1)
    assert outcomes == [*pending, last]
    with engine.connect() as conn:
        error = conn.execute(sa.text("SELECT last_error FROM jobs")).scalar_one()
    assert error == f"stack down (released {MAX_RELEASES_PER_JOB + 1} times by its page)"


def test_a_job_whose_consumer_is_killed_six_times_completes_with_one_attempt(
    engine: Engine,
) -> None:
    """Six consumer deaths under one job (each restart recovers it) and a rescue: the job runs
    again every time, and completes having used one attempt."""
    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob("noop", max_attempts=1)], default_max_attempts=3
        ).ids
    for _ in range(6):
        with engine.begin() as conn:
            store.assign_jobs(conn, [(job_id, "h1")])
            store.claim_jobs(conn, "h1", 6)
            assert store.recover_host_jobs(conn, "h1") == [job_id]
    with engine.begin() as conn:
        store.assign_jobs(conn, [(job_id, "h1")])
        claimed = store.claim_jobs(conn, "h1", 6).jobs[0]
        assert store.complete_job(conn, "h1", job_id, claimed.claim, {"ok": True})
        row = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()
    assert (row.status, row.attempts, row.claims, row.releases) == ("completed", 1, 7, 6)


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
    # The browser job left (ids[2]): with budget to spare, a freed slot takes it; with the
    # stack's budget spent, it waits for the budget (a restart wakes the consumer), not a slot.
    assert claim.more
    with engine.begin() as conn:
        assert store.claim_jobs(conn, "h1", 2, browser_limit=0).more is False
        assert store.claim_jobs(conn, "h1", 2, browser_limit=2).jobs[0].id == ids[2]


def test_a_claim_says_whether_jobs_stay_queued_and_counts_only_what_it_took(
    engine: Engine,
) -> None:
    """``more`` tells the consumer to claim again when a slot frees; without it, it waits for
    the next assignment. An empty claim reads the counters and writes nothing."""
    _setup_host(engine)
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob("noop")] * 3, default_max_attempts=3).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
    with engine.begin() as conn:
        first = store.claim_jobs(conn, "h1", 2)
        second = store.claim_jobs(conn, "h1", 2)
    assert [j.id for j in first.jobs] == ids[:2] and first.more
    assert [j.id for j in second.jobs] == ids[2:] and not second.more

    def host_row_version() -> object:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT xmin::text FROM hosts WHERE name = 'h1'")).scalar()

    before = host_row_version()
    with engine.begin() as conn:
        empty = store.claim_jobs(conn, "h1", 6)
    assert empty.jobs == [] and not empty.more and host_row_version() == before
    with engine.connect() as conn:
        total = conn.execute(sa.text("SELECT jobs_total FROM hosts WHERE name = 'h1'")).scalar()
    assert total == 3
    with pytest.raises(NotFound, match="nosuch"), engine.begin() as conn:
        store.claim_jobs(conn, "nosuch", 6)


def test_a_claim_in_autocommit_takes_nothing_for_a_host_without_a_row(engine: Engine) -> None:
    """The consumer's claim commits by itself: were its answer refused (NotFound) after it
    took jobs, they would sit 'processing' on no one. It takes none."""
    _setup_host(engine)
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob("noop")] * 2, default_max_attempts=3).ids
        store.assign_jobs(conn, [(job_id, "h1") for job_id in ids])
        conn.execute(sa.text("DELETE FROM hosts WHERE name = 'h1'"))  # behind its queue's back
    with pytest.raises(NotFound, match="h1"), engine.connect() as conn:
        store.claim_jobs(conn.execution_options(isolation_level="AUTOCOMMIT"), "h1", 6)
    with engine.connect() as conn:
        statuses = conn.execute(sa.text("SELECT status, attempts FROM jobs")).all()
    assert sorted(statuses) == [("queued", 0), ("queued", 0)]


def test_the_store_fails_an_attempt_that_was_the_last_even_when_told_to_retry(
    engine: Engine,
) -> None:
    _setup_host(engine)
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=1).ids
        store.assign_jobs(conn, [(job_id, "h1")])
        (job,) = store.claim_jobs(conn, "h1", 6).jobs
        later = utcnow() + timedelta(seconds=30)
        assert store.fail_attempt(conn, "h1", job_id, 1, "boom", retry_at=later) == "failed"
        row = conn.execute(
            sa.text("SELECT host, not_before, finished_at FROM jobs WHERE id = :id"),
            {"id": job_id},
        ).one()
    assert attempts_exhausted(job.attempt, job.max_attempts)
    assert row.host == "h1" and row.not_before is None and row.finished_at is not None


def test_the_exhaustion_rule_says_the_same_in_sql_and_in_python(engine: Engine) -> None:
    cases = [(a, m) for m in (1, 2, 3) for a in (0, 1, 2, 3, 4)]
    with engine.connect() as conn:
        in_sql = conn.execute(
            sa.text(
                f"SELECT attempts, max_attempts, {ATTEMPTS_EXHAUSTED_SQL} AS exhausted"
                " FROM unnest(CAST(:a AS int[]), CAST(:m AS int[])) AS c(attempts, max_attempts)"
            ),
            {"a": [a for a, _ in cases], "m": [m for _, m in cases]},
        ).all()
    assert len(in_sql) == len(cases)
    for row in in_sql:
        assert row.exhausted is attempts_exhausted(row.attempts, row.max_attempts), row


def test_operator_filters_combine_and_refuse_to_match_everything(engine: Engine) -> None:
    for name in ("h1", "h2"):
        _setup_host(engine, name)
    with engine.begin() as conn:
        ids = store.insert_jobs(
            conn, [NewJob("noop"), NewJob("noop"), NewJob("http_get")], default_max_attempts=3
        ).ids
        store.assign_jobs(conn, [(ids[0], "h1"), (ids[1], "h2"), (ids[2], "h1")])
        assert store.cancel_jobs(conn, JobFilter(kind="noop", host="h1")) == [ids[0]]
        assert store.cancel_jobs(conn, JobFilter(host="h1")) == [ids[2]]
        assert store.cancel_jobs(conn, JobFilter(ids=[ids[0], ids[1]])) == [ids[1]]
        assert store.retry_jobs(conn, JobFilter(kind="http_get")) == []
        assert store.retry_jobs(conn, JobFilter(kind="http_get"), include_cancelled=True) == [
            ids[2]
        ]
        for nothing in (JobFilter(), JobFilter(ids=[], kind="", host=None)):
            with pytest.raises(Exception, match="refusing"):
                store.retry_jobs(conn, nothing)
    assert _statuses(engine) == {ids[0]: "cancelled", ids[1]: "cancelled", ids[2]: "pending"}


def test_host_moves_are_recorded_and_allowed(engine: Engine) -> None:
    with engine.begin() as conn:
        assert store.register_consumer(conn, "h1", 2, "boot-a").state == HostState.ACTIVE
        assert store.set_host_state(conn, "h1", HostState.RESTARTING, "stack restart")
        assert store.set_host_state(conn, "h1", HostState.ACTIVE, "stack ready")
        assert not store.set_host_state(
            conn, "h1", HostState.OFFLINE, "probe", expected=[HostState.REBOOTING]
        )
        store.drain_host(conn, "h1")
        assert store.reactivate_after_own_drain(conn, "h1", "drained by operator")
        assert store.set_host_state(conn, "h1", HostState.DISABLED, "by hand")
        assert store.enable_host(conn, "h1")
        store.remove_host(conn, "h1")
    made = moves_made(engine)
    assert (HostState.RESTARTING, HostState.ACTIVE) in made
    assert (HostState.DISABLED, HostState.ACTIVE) in made
    assert all(JobStatus.PENDING not in move for move in made)


def test_an_assignment_wakes_its_own_host_alone(engine: Engine, database_url: str) -> None:
    """The producer NOTIFYs each host on its own channel: h2's consumer hears nothing of h1's
    work, h1's hears its own, a job pinned at submit wakes its host the same way, and a host
    none of whose planned jobs moved is not woken."""
    _setup_host(engine)
    _setup_host(engine, "h2")
    listeners = {h: Listener(database_url, [h], resolve=host_channels) for h in ("h1", "h2")}
    try:
        for listener in listeners.values():
            listener.wait(0)  # connects and LISTENs
        with engine.begin() as conn:
            ids = store.insert_jobs(conn, [NewJob("noop")] * 2, default_max_attempts=3).ids
            store.assign_jobs(conn, [(i, "h1") for i in ids])
        assert wait_for(lambda: listeners["h1"].wait(0.2), 10, "h1's NOTIFY") == ["h1"]
        assert listeners["h2"].wait(0.3) == []
        with engine.begin() as conn:
            (pinned,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3).ids
            store.pin_jobs_to_host(conn, [pinned], "h2")
        assert wait_for(lambda: listeners["h2"].wait(0.2), 10, "h2's NOTIFY") == ["h2"]
        assert listeners["h1"].wait(0.3) == []
        # A host planned for whose job was taken back meanwhile moves nothing and hears nothing.
        with engine.begin() as conn:
            mine, taken_back = store.insert_jobs(
                conn, [NewJob("noop")] * 2, default_max_attempts=3
            ).ids
            assert store.cancel_jobs(conn, JobFilter(ids=[taken_back])) == [taken_back]
            moved = store.assign_jobs(conn, [(mine, "h1"), (taken_back, "h2")])
        assert moved == [(mine, "h1")]
        assert wait_for(lambda: listeners["h1"].wait(0.2), 10, "h1's NOTIFY") == ["h1"]
        assert listeners["h2"].wait(0.3) == []
    finally:
        for listener in listeners.values():
            listener.close()
