"""Jobs that make jobs against real PostgreSQL: children go in with the completion that moves
their parent, or not at all; a crawl never inserts one dedupe key twice, nor past its bounds."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import HostSpec, NewJob

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _child(key: str | None, kind: str = "noop") -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": kind, "payload": {"key": key}, "needs_browser": False}
    return entry if key is None else entry | {"dedupe_key": key}


def _hosts(engine: Engine, *names: str) -> None:
    with engine.begin() as conn:
        for name in names:
            store.add_host(conn, HostSpec(name=name, capacity=6))


def _run_on(engine: Engine, job_id: int, host: str) -> int:
    """Assign the (pending) job to host and claim it there; returns the claim (the attempt's
    token)."""
    with engine.begin() as conn:
        store.assign_jobs(conn, [(job_id, host)])
        (claimed,) = store.claim_jobs(conn, host, 1).jobs
    assert claimed.id == job_id
    return claimed.claim


def _jobs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT id, parent_id, depth, crawl_id, status, payload->>'key' AS key"
                " FROM jobs ORDER BY id"
            )
        ).all()


def _crawl(engine: Engine, **bounds: int) -> int:
    with engine.begin() as conn:
        return store.start_crawl(
            conn, kind="noop", payload={}, seed="root", dedupe_key="root", **bounds
        )


def test_children_go_in_with_the_completion(engine: Engine) -> None:
    _hosts(engine, "h1")
    with engine.begin() as conn:
        (parent,) = store.insert_jobs(conn, [NewJob("noop", {})], default_max_attempts=3).ids
    attempt = _run_on(engine, parent, "h1")
    with engine.begin() as conn:
        moved = store.complete_jobs(
            conn, "h1", [(parent, attempt, {"ok": 1})], {parent: [_child("a"), _child("b")]}
        )
    assert moved == [parent]
    rows = _jobs(engine)
    # A job that spawns with no crawl becomes its own crawl's root, bounded by the defaults.
    assert [(r.parent_id, r.depth, r.crawl_id, r.status, r.key) for r in rows] == [
        (None, 0, parent, "completed", None),
        (parent, 1, parent, "pending", "a"),
        (parent, 1, parent, "pending", "b"),
    ]
    with engine.connect() as conn:
        crawl = conn.execute(sa.text("SELECT * FROM crawls")).one()
    assert (crawl.crawl_id, crawl.jobs, crawl.done, crawl.pending, crawl.depth_reached) == (
        parent,
        3,
        1,
        2,
        0,
    )


def test_a_dropped_completion_inserts_nothing_and_the_rerun_spawns_once(engine: Engine) -> None:
    _hosts(engine, "h1", "h2")
    crawl = _crawl(engine, max_depth=3, max_jobs=100)
    first = _run_on(engine, crawl, "h1")
    with engine.begin() as conn:  # h1 went silent: its attempt is handed back, h2 runs it
        assert store.recover_host_jobs(conn, "h1") == [crawl]
    second = _run_on(engine, crawl, "h2")
    children = [_child("a"), _child("b"), _child("root")]

    with engine.begin() as conn:  # h1's late result: neither it nor its children go in
        assert store.complete_jobs(conn, "h1", [(crawl, first, {})], {crawl: children}) == []
        assert not store.complete_job(conn, "h1", crawl, first, {}, children)
    assert [r.id for r in _jobs(engine)] == [crawl]

    with engine.begin() as conn:
        assert store.complete_job(conn, "h2", crawl, second, {}, children)
    rows = _jobs(engine)
    assert [r.key for r in rows[1:]] == ["a", "b"]  # the seed's own key was seen from the start

    # The next attempts of the crawl (a child re-run after a crash, another page linking back)
    # offer the same keys again: none goes in twice.
    a = rows[1].id
    attempt = _run_on(engine, a, "h1")
    with engine.begin() as conn:
        store.complete_jobs(conn, "h1", [(a, attempt, {})], {a: [_child("b"), _child("c")]})
    assert sorted(r.key for r in _jobs(engine)[1:]) == ["a", "b", "c"]
    assert [(r.depth, r.parent_id) for r in _jobs(engine) if r.key == "c"] == [(2, a)]


def test_depth_and_job_limits_of_the_crawl(engine: Engine) -> None:
    _hosts(engine, "h1")
    crawl = _crawl(engine, max_depth=1, max_jobs=3)
    attempt = _run_on(engine, crawl, "h1")
    offered = [_child(k) for k in "abcde"]
    with engine.begin() as conn:
        store.complete_jobs(conn, "h1", [(crawl, attempt, {})], {crawl: offered})
    rows = _jobs(engine)
    assert [r.key for r in rows[1:]] == ["a", "b"]  # 3 jobs in all, the root included
    a = rows[1].id
    attempt = _run_on(engine, a, "h1")
    with engine.begin() as conn:  # depth 2 > max_depth 1: nothing, but a completes
        assert store.complete_job(conn, "h1", a, attempt, {}, [_child("z")])
    assert len(_jobs(engine)) == 3
    with engine.connect() as conn:
        seen = conn.execute(sa.text("SELECT dedupe_key FROM crawl_seen ORDER BY 1")).scalars()
        assert list(seen) == ["a", "b", "root"]  # keys dropped by a bound stay unseen


def test_children_without_a_dedupe_key_all_go_in(engine: Engine) -> None:
    _hosts(engine, "h1")
    crawl = _crawl(engine, max_depth=2, max_jobs=100)
    attempt = _run_on(engine, crawl, "h1")
    with engine.begin() as conn:
        store.complete_job(conn, "h1", crawl, attempt, {}, [_child(None), _child(None)])
    assert len(_jobs(engine)) == 3


def _complete(engine: Engine, job_id: int, host: str, *keys: str) -> None:
    attempt = _run_on(engine, job_id, host)
    with engine.begin() as conn:
        assert store.complete_job(conn, host, job_id, attempt, {}, [_child(k) for k in keys])


def _by_key(engine: Engine) -> dict[str, Any]:
    return {r.key: r for r in _jobs(engine) if r.key is not None}


def test_a_page_found_again_nearer_the_root_takes_the_nearer_depth(engine: Engine) -> None:
    """root -> a, e; a -> b; b -> x (depth 3, still pending); e -> x again (depth 2): x's job
    takes depth 2, so its own link y (depth 3) is within the bound. Once a page has run, its
    depth stays: what it spawned was spawned."""
    _hosts(engine, "h1")
    crawl = _crawl(engine, max_depth=3, max_jobs=100)
    _complete(engine, crawl, "h1", "a", "e")
    _complete(engine, _by_key(engine)["a"].id, "h1", "b")
    _complete(engine, _by_key(engine)["b"].id, "h1", "x")
    assert _by_key(engine)["x"].depth == 3
    _complete(engine, _by_key(engine)["e"].id, "h1", "x", "b")  # b has run: it stays at 2
    jobs = _by_key(engine)
    assert (jobs["x"].depth, jobs["b"].depth, len(jobs)) == (2, 2, 4)
    _complete(engine, jobs["x"].id, "h1", "y")
    assert _by_key(engine)["y"].depth == 3
    with engine.connect() as conn:
        seen = dict(conn.execute(sa.text("SELECT dedupe_key, depth FROM crawl_seen")).all())
    assert seen == {"root": 0, "a": 1, "e": 1, "b": 2, "x": 2, "y": 3}


def test_one_transaction_completes_pages_of_two_crawls(engine: Engine) -> None:
    _hosts(engine, "h1")
    first, second = (
        _crawl(engine, max_depth=2, max_jobs=10),
        _crawl(engine, max_depth=2, max_jobs=10),
    )
    with engine.begin() as conn:
        store.assign_jobs(conn, [(first, "h1"), (second, "h1")])
        claimed = {j.id: j.attempt for j in store.claim_jobs(conn, "h1", 2).jobs}
    with engine.begin() as conn:
        moved = store.complete_jobs(
            conn,
            "h1",
            [(second, claimed[second], {}), (first, claimed[first], {})],
            {first: [_child("a")], second: [_child("a"), _child("b")]},
        )
    assert moved == [first, second]
    rows = _jobs(engine)
    assert sorted((r.crawl_id, r.key) for r in rows if r.key) == [
        (first, "a"),
        (second, "a"),
        (second, "b"),
    ]
