"""Spawning under a consumer's own database role: its role may not INSERT a job, yet the
children of its own attempt go in with the completion (spawn_children, SECURITY DEFINER); it
cannot spawn under another host's job, nor under an attempt no longer in processing."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import NewJob
from tests.integration.test_db_roles import (  # noqa: F401  (fixtures)
    OTHER,
    OWN,
    admin,
    fleet,
    own,
    queue,
    refused,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CHILDREN = [
    {"kind": "noop", "payload": {}, "needs_browser": False, "dedupe_key": "a"},
    {"kind": "noop", "payload": {}, "needs_browser": False, "dedupe_key": "b"},
]


@pytest.fixture
def clean(admin: Engine) -> Engine:  # noqa: F811
    with admin.begin() as conn:
        conn.execute(sa.text("TRUNCATE crawl_runs, crawl_seen"))
    return admin


def _children_of(engine: Engine, parent: int) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT depth, crawl_id, host FROM jobs WHERE parent_id = :p ORDER BY id"),
            {"p": parent},
        ).all()


def test_a_consumer_spawns_with_its_own_completion(clean: Engine, own: Engine) -> None:  # noqa: F811
    (job,) = queue(clean, OWN)
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.complete_jobs(conn, OWN, [(job, 1, {})], {job: CHILDREN}) == [job]
    assert [tuple(r) for r in _children_of(clean, job)] == [(1, job, None), (1, job, None)]
    # Still no INSERT of its own.
    assert "permission denied" in refused(own, "INSERT INTO jobs (kind) VALUES ('noop')")
    assert "permission denied" in refused(own, "INSERT INTO crawl_seen VALUES (1, 'x')")


def test_a_consumer_cannot_spawn_under_another_hosts_job(clean: Engine, own: Engine) -> None:  # noqa: F811
    (theirs,) = queue(clean, OTHER)
    with clean.begin() as conn:
        store.claim_jobs(conn, OTHER, 1)  # processing on OTHER, attempt 1
    with own.begin() as conn:
        # Naming the other host changes nothing: the function asks db_roles who is calling.
        assert store.spawn_children(conn, OTHER, [(theirs, 1, CHILDREN)]) == {}
        assert store.spawn_children(conn, OWN, [(theirs, 1, CHILDREN)]) == {}
    assert _children_of(clean, theirs) == []


def test_no_spawn_under_an_attempt_that_is_not_processing(clean: Engine, own: Engine) -> None:  # noqa: F811
    (job,) = queue(clean, OWN)  # queued, not yet claimed
    with own.begin() as conn:
        assert store.spawn_children(conn, OWN, [(job, 0, CHILDREN)]) == {}
        store.claim_jobs(conn, OWN, 1)
        assert store.spawn_children(conn, OWN, [(job, 2, CHILDREN)]) == {}  # not this attempt
        assert store.complete_job(conn, OWN, job, 1, {})
    with own.begin() as conn:  # completed: too late to add any
        assert store.spawn_children(conn, OWN, [(job, 1, CHILDREN)]) == {}
    assert _children_of(clean, job) == []


def _priorities_and_kinds(engine: Engine, parent: int) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT priority, kind FROM jobs WHERE parent_id = :p ORDER BY id"),
            {"p": parent},
        )
        return [(r.priority, r.kind) for r in rows]


def test_a_child_gets_at_most_its_parents_priority(clean: Engine, own: Engine) -> None:  # noqa: F811
    with clean.begin() as conn:
        new = [NewJob("noop", {}, priority=5)]
        (job,) = store.insert_jobs(conn, new, default_max_attempts=1).ids
        store.assign_jobs(conn, [(job, OWN)])
    flood = {"kind": "noop", "payload": {}, "needs_browser": False, "priority": 2147483647}
    lower = {"kind": "noop", "payload": {}, "needs_browser": False, "priority": -3}
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        store.spawn_children(conn, OWN, [(job, 1, [flood, lower])])
    assert _priorities_and_kinds(clean, job) == [(5, "noop"), (-3, "noop")]


def test_a_crawls_pages_spawn_only_its_kind(clean: Engine, own: Engine) -> None:  # noqa: F811
    with clean.begin() as conn:
        root = store.start_crawl(conn, kind="noop", payload={}, max_depth=3, max_jobs=100)
        store.assign_jobs(conn, [(root, OWN)])
    other = {"kind": "http_get", "payload": {"url": "http://10.0.0.1/"}, "dedupe_key": "x"}
    same = {"kind": "noop", "payload": {}, "dedupe_key": "y"}
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.spawn_children(conn, OWN, [(root, 1, [other, same])]) == {root: 1}
    assert _priorities_and_kinds(clean, root) == [(0, "noop")]
    with clean.connect() as conn:  # the refused child's key was not taken either
        seen = conn.execute(sa.text("SELECT dedupe_key FROM crawl_seen ORDER BY 1")).scalars()
        assert list(seen) == ["y"]


def _count_children(engine: Engine, parent: int) -> int:
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM jobs WHERE parent_id = :p")
        return int(conn.execute(query, {"p": parent}).scalar_one())


def _spawn_refused(own: Engine, job: int, claim: int, children: list[Any]) -> str:  # noqa: F811
    with pytest.raises(sa.exc.DBAPIError) as caught, own.begin() as conn:
        store.spawn_children(conn, OWN, [(job, claim, children)])
    return str(caught.value.orig)


def test_an_attempt_spawns_once_however_often_it_calls(clean: Engine, own: Engine) -> None:  # noqa: F811
    (job,) = queue(clean, OWN)
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.spawn_children(conn, OWN, [(job, 1, CHILDREN)]) == {job: 2}
    # No completion: the attempt is still in processing, and calls again with new keys.
    again = [dict(c, dedupe_key=f"again-{c['dedupe_key']}") for c in CHILDREN]
    assert "already spawned" in _spawn_refused(own, job, 1, again)
    assert _count_children(clean, job) == 2


def test_flipping_a_job_back_spawns_no_second_flood(clean: Engine, own: Engine) -> None:  # noqa: F811
    """The repro: 1,000 children with the completion, then the consumer's role moves its own
    job back to processing (a new claim) and spawns 1,000 more, or through queued and a claim
    of its own."""
    (job,) = queue(clean, OWN)
    flood = [{"kind": "noop", "payload": {"n": n}, "needs_browser": False} for n in range(1000)]
    with own.begin() as conn:
        store.claim_jobs(conn, OWN, 1)
        assert store.complete_jobs(conn, OWN, [(job, 1, {})], {job: flood}) == [job]
    # Its role can no longer move a finished job at all (migration 0031): no new claim.
    with own.begin() as conn:
        for back in ("processing", "queued"):
            flip = sa.text(f"UPDATE jobs SET status = '{back}' WHERE id = :j")
            assert conn.execute(flip, {"j": job}).rowcount == 0
        assert store.claim_jobs(conn, OWN, 1).jobs == []
        assert store.spawn_children(conn, OWN, [(job, 2, flood)]) == {}
    # The owner's flip (no consumer's role can make it): the mark still refuses a second flood.
    with clean.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'processing' WHERE id = :j"), {"j": job})
    assert "already spawned" in _spawn_refused(own, job, 2, flood)
    # Nor can its role clear the mark.
    clear = f"UPDATE jobs SET spawned_claim = NULL WHERE id = {job}"
    assert "permission denied" in refused(own, clear)
    assert _count_children(clean, job) == 1000
