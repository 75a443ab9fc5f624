"""Rate limits against real PostgreSQL: the default key, the pending reads within a budget, the
producer's cycles under limits, the back-off state and the operator's view. (The plans of the
rate-limit reads are checked in test_query_plans.)"""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import RATE_FACTOR_MIN
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.jobs.rate_limits import URL_KEYED_KINDS, PendingSkips, RateLimit, Slowdown
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.store import NewJob
from tests.integration.producer_helpers import (
    add_hosts,
    count_status,
    publish_status,
    submit,
)
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SLOW = {"slow.test": {"concurrency": 2, "per_minute": 60}}


def _in_flight_by_key(engine: Engine) -> dict[str | None, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT rate_key, count(*) FROM jobs"
                " WHERE status IN ('queued', 'processing') GROUP BY rate_key"
            )
        ).all()
    return {r[0]: r[1] for r in rows}


def _fleet(engine: Engine, state_dir: Path, **capacities: int) -> None:
    add_hosts(engine, capacities)
    for name in capacities:
        publish_status(state_dir, name)


def _run_and_finish(engine: Engine, host: str) -> int:
    """A stand-in consumer: claim everything queued on ``host`` and complete it."""
    with engine.begin() as conn:
        claimed = store.claim_jobs(conn, host, 100).jobs
        store.complete_jobs(conn, host, [(j.id, j.attempt, {}) for j in claimed])
    return len(claimed)


# ---------------------------------------------------------------- the key


@pytest.mark.parametrize(
    "url",
    [
        "https://Example.ORG/a?b#c",
        "http://user:pw@shop.example.com:8080/x",
        "http://a@b@c.example/",
        "http://[::1]:8000/",
        "http://127.0.0.1/",
        "HTTPS://UPPER.EXAMPLE",
        "https://example.org./",
    ],
)
def test_the_built_in_actions_default_key_is_the_urls_host(engine: Engine, url: str) -> None:
    (job_id,) = submit(engine, [NewJob("http_get", {"url": url})])
    with engine.connect() as conn:
        key = conn.execute(
            sa.text("SELECT rate_key FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    assert key == urlsplit(url).hostname


def test_a_given_key_wins_and_other_kinds_have_none_by_default(engine: Engine) -> None:
    ids = submit(
        engine,
        [
            NewJob("http_get", {"url": "https://example.org/"}, rate_key="account-7"),
            NewJob("noop"),
            NewJob("noop", rate_key="partner-api"),
            NewJob("http_get", {"url": "not a url"}),
        ],
    )
    with engine.connect() as conn:
        keys = conn.execute(
            sa.text("SELECT rate_key FROM jobs WHERE id = ANY(:ids) ORDER BY id"), {"ids": ids}
        ).scalars()
        assert list(keys) == ["account-7", None, "partner-api", None]
        trigger = conn.execute(
            sa.text(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname ="
                " 'jobs_default_rate_key'"
            )
        ).scalar_one()
    assert all(f"'{kind}'" in trigger for kind in URL_KEYED_KINDS), trigger


@pytest.mark.parametrize("bad", ["", "*", "k" * 201])
def test_a_bad_rate_key_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(SubmitError, match="field 'rate_key'"):
        validate_job({"kind": "noop", "rate_key": bad})


# ---------------------------------------------------------------- the pending reads


def test_a_backlog_on_a_tight_key_never_fills_the_read(engine: Engine) -> None:
    backlog = submit(engine, [NewJob("noop", rate_key="slow.test") for _ in range(2000)])
    others = submit(engine, [NewJob("noop", rate_key=f"site-{i % 7}.test") for i in range(50)])
    skips = PendingSkips(tight_keys={"slow.test": 2})
    with engine.begin() as conn:
        jobs = store.lock_pending_within_limits(conn, 40, skips)
    # The budget read comes on top of the main one, and the two merge in the pending order.
    assert [j.id for j in jobs] == backlog[:2] + others[:40]
    with engine.begin() as conn:
        saturated = store.lock_pending_within_limits(
            conn, 40, PendingSkips(saturated_keys=("slow.test",))
        )
    assert [j.id for j in saturated] == others[:40]


def test_tight_kinds_and_keys_are_read_once_each(engine: Engine) -> None:
    submit(engine, [NewJob("noop", rate_key="a.test") for _ in range(20)])
    submit(engine, [NewJob("http_get", {"url": "https://b.test/"}) for _ in range(20)])
    submit(engine, [NewJob("noop") for _ in range(20)])
    skips = PendingSkips(tight_keys={"a.test": 3, "b.test": 5}, tight_kinds={"noop": 4})
    with engine.begin() as conn:
        jobs = store.lock_pending_within_limits(conn, 100, skips)
    by = [(j.kind, j.rate_key) for j in jobs]
    assert len({j.id for j in jobs}) == len(jobs)
    assert by.count(("noop", "a.test")) == 3 and by.count(("http_get", "b.test")) == 5
    assert by.count(("noop", None)) == 4  # the kind's budget, on the jobs of untight keys


# ---------------------------------------------------------------- the producer


def test_a_limited_key_gets_its_limit_and_the_others_every_other_slot(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6, h2=6)
    submit(engine, [NewJob("noop", rate_key="slow.test") for _ in range(500)])
    submit(engine, [NewJob("noop", rate_key=f"site-{i % 5}.test") for i in range(30)])
    producer = make_producer(rate_limits=SLOW)

    assert producer.run_cycle().assigned == 12
    assert _in_flight_by_key(engine)["slow.test"] == 2
    assert producer.run_cycle().assigned == 0  # full: nothing of the backlog sneaks in
    _run_and_finish(engine, "h1")
    _run_and_finish(engine, "h2")
    producer.run_cycle()
    assert _in_flight_by_key(engine)["slow.test"] == 2
    assert sum(_in_flight_by_key(engine).values()) == 12


def test_per_minute_counts_the_starts_of_the_trailing_minute(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6)
    submit(engine, [NewJob("noop", rate_key="slow.test") for _ in range(50)])
    producer = make_producer(rate_limits={"slow.test": {"per_minute": 5}})
    for _ in range(4):
        producer.run_cycle()
        _run_and_finish(engine, "h1")
    with engine.connect() as conn:
        started = conn.execute(
            sa.text("SELECT count(*) FROM jobs WHERE started_at IS NOT NULL")
        ).scalar_one()
        # Age the starts past the window: the key gets its next five.
        conn.execute(sa.text("UPDATE jobs SET started_at = started_at - interval '61 seconds'"))
        conn.commit()
    assert started == 5
    # The window's use is read again within RATE_WINDOW_REFRESH_S: then the next five go.
    wait_for(lambda: producer.run_cycle().assigned == 5, scaled(5), "the next minute's five")


def test_the_default_and_kind_limits_hold(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=20)
    for site in ("a.test", "b.test", "c.test"):
        submit(engine, [NewJob("noop", rate_key=site) for _ in range(10)])
    submit(engine, [NewJob("http_get", {"url": f"https://d.test/{i}"}) for i in range(10)])
    producer = make_producer(
        rate_limit_default={"concurrency": 3}, kind_limits={"http_get": {"concurrency": 1}}
    )
    producer.run_cycle()
    assert _in_flight_by_key(engine) == {"a.test": 3, "b.test": 3, "c.test": 3, "d.test": 1}


def test_a_paused_key_waits_and_the_view_says_why(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6)
    submit(engine, [NewJob("noop", rate_key="pushy.test") for _ in range(5)])
    submit(engine, [NewJob("noop", rate_key="calm.test") for _ in range(2)])
    until = utcnow() + timedelta(minutes=5)
    with engine.begin() as conn:
        store.save_rate_keys(conn, {}, None, {"pushy.test": Slowdown(0.25, until)}, utcnow())
    producer = make_producer(rate_limits={"calm.test": {"concurrency": 1}})

    producer.run_cycle()  # a full cycle: it takes the lead and reads the saved state

    assert _in_flight_by_key(engine) == {"calm.test": 1}
    with engine.connect() as conn:
        view = {r.key: r for r in conn.execute(sa.text("SELECT * FROM rate_limits"))}
        saved = store.rate_slowdowns(conn)
    assert saved == {"pushy.test": Slowdown(0.25, until)}
    assert view["pushy.test"].paused_until == until and view["pushy.test"].pending == 5
    assert view["pushy.test"].factor == 0.25
    assert view["calm.test"].concurrency_limit == 1 and view["calm.test"].in_flight == 1


def test_the_view_shows_the_default_for_unnamed_keys(engine: Engine) -> None:
    submit(engine, [NewJob("noop", rate_key="x.test"), NewJob("noop", rate_key="y.test")])
    with engine.begin() as conn:
        store.save_rate_keys(
            conn,
            {"y.test": RateLimit(per_minute=7)},
            RateLimit(concurrency=4, per_minute=50),
            {},
            utcnow(),
        )
        rows = conn.execute(
            sa.text("SELECT key, concurrency_limit, per_minute_limit FROM rate_limits")
        ).all()
    assert [tuple(r) for r in rows] == [("x.test", 4, 50), ("y.test", None, 7)]


def test_saving_forgets_keys_no_longer_slowed_or_named(engine: Engine) -> None:
    now = utcnow()
    with engine.begin() as conn:
        store.save_rate_keys(conn, {"a.test": RateLimit(concurrency=1)}, None, {}, now)
        store.save_rate_keys(conn, {}, None, {"b.test": Slowdown(0.5)}, now)
        keys = conn.execute(sa.text("SELECT key, named FROM rate_keys")).all()
    assert [tuple(k) for k in keys] == [("b.test", False)]


# ---------------------------------------------------------------- back-off


def _pushed_back(engine: Engine, host: str, error_class: str, retry_in_s: float) -> None:
    """What the consumer's failure path records when a site pushes back on every attempt
    running on ``host``: the class, and the time the job may run again."""
    with engine.begin() as conn:
        claimed = store.claim_jobs(conn, host, 100).jobs
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'pending', host = NULL, error_class = :class,"
                " not_before = now() + make_interval(secs => :s) WHERE id = ANY(:ids)"
            ),
            {"class": error_class, "s": retry_in_s, "ids": [j.id for j in claimed]},
        )


def test_a_push_back_slows_the_key_and_successes_bring_it_back(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=8)
    submit(engine, [NewJob("noop", rate_key="pushy.test") for _ in range(100)])
    producer = make_producer(rate_limits={"pushy.test": {"concurrency": 8}})
    assert producer.run_cycle().assigned == 8

    _pushed_back(engine, "h1", "rate_limited", retry_in_s=300)
    report = producer.run_cycle()

    assert report.assigned == 0  # paused until the site's Retry-After
    with engine.connect() as conn:
        (slowed,) = store.rate_slowdowns(conn).values()
        view = conn.execute(sa.text("SELECT * FROM rate_limits WHERE key = 'pushy.test'")).one()
    assert slowed.factor == RATE_FACTOR_MIN  # halved per push-back, down to the floor
    assert slowed.paused_until is not None
    assert slowed.paused_until > utcnow() + timedelta(seconds=290)
    assert view.paused_until == slowed.paused_until and view.factor == slowed.factor

    # The pause over (a new leader reads the saved state), the key runs at its slowed pace...
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET not_before = NULL"))
        conn.execute(sa.text("UPDATE rate_keys SET paused_until = NULL"))
    producer.stop()
    producer = make_producer(rate_limits={"pushy.test": {"concurrency": 8}})
    assert producer.run_cycle().assigned == 1  # 8 x 1/16, never below one
    # ...and each success wins some of it back.
    for _ in range(12):
        _run_and_finish(engine, "h1")
        producer.run_cycle()
    with engine.connect() as conn:
        recovered = store.rate_slowdowns(conn).get("pushy.test")
    assert recovered is None or recovered.factor > 4 * slowed.factor


def test_a_blocked_attempt_slows_the_key_without_a_pause(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=4)
    submit(engine, [NewJob("noop", rate_key="strict.test") for _ in range(10)])
    producer = make_producer()
    assert producer.run_cycle().assigned == 4
    _pushed_back(engine, "h1", "blocked", retry_in_s=0)
    producer.run_cycle()
    with engine.connect() as conn:
        assert store.rate_slowdowns(conn) == {"strict.test": Slowdown(RATE_FACTOR_MIN)}


def test_a_job_handed_back_later_is_no_push_back(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    """Only the attempt that ended rate limited counts: the same job's next attempt, cut short
    by its host (a crash, a stack fault), still carries the job's last class but says nothing
    about the site."""
    _fleet(engine, tmp_path, h1=4)
    (job_id,) = submit(engine, [NewJob("noop", rate_key="calm.test")])
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET error_class = 'rate_limited' WHERE id = :id"), {"id": job_id}
        )
    producer = make_producer()
    assert producer.run_cycle().assigned == 1
    with engine.begin() as conn:
        (claimed,) = store.claim_jobs(conn, "h1", 1).jobs
        assert store.release_job(conn, "h1", job_id, claimed.attempt, "released: stack died")
    producer.run_cycle()
    with engine.connect() as conn:
        assert store.rate_slowdowns(conn) == {}


def test_a_crawled_site_is_held_to_the_crawl_default_across_the_fleet(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, **{f"h{n}": 6 for n in range(10)})
    pages = [NewJob("crawl", {"url": f"http://docs.test/p/{i}"}) for i in range(200)]
    submit(engine, [*pages, *(NewJob("noop") for _ in range(100))])
    producer = make_producer()

    # The first cycle learns the site is crawled from the jobs it reads (a pending read
    # mostly of that site's pages); from the next on the site's backlog is left out.
    first = producer.run_cycle().assigned
    assert first + producer.run_cycle().assigned == 60
    assert _in_flight_by_key(engine)["docs.test"] == 2  # not sixty requests on one site
    _run_and_finish(engine, "h0")
    producer.run_cycle()
    assert _in_flight_by_key(engine)["docs.test"] == 2


def test_the_crawl_default_can_be_lifted(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6, h2=6)
    submit(engine, [NewJob("crawl", {"url": f"http://docs.test/p/{i}"}) for i in range(50)])
    producer = make_producer(crawl_site_concurrency=None)
    producer.run_cycle()
    assert _in_flight_by_key(engine)["docs.test"] == 12


def _complete_with(engine: Engine, host: str, result: dict[str, Any]) -> int:
    """A stand-in consumer: claim everything queued on ``host``, complete it with ``result``."""
    with engine.begin() as conn:
        claimed = store.claim_jobs(conn, host, 100).jobs
        store.complete_jobs(conn, host, [(j.id, j.attempt, result) for j in claimed])
    return len(claimed)


def test_a_sites_crawl_delay_spaces_its_pages_fleet_wide(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6, h2=6)
    producer = make_producer()
    producer.run_cycle()  # the lead taken: the audit rows are read from here on
    submit(engine, [NewJob("crawl", {"url": "http://slow.test/"})])
    producer.run_cycle()
    delay = {"crawl_delay_s": 1.0}  # what a page of a site whose robots.txt says so reports
    assert _complete_with(engine, "h1", delay) + _complete_with(engine, "h2", delay) == 1
    pages = submit(engine, [NewJob("crawl", {"url": f"http://slow.test/{i}"}) for i in range(4)])
    submit(engine, [NewJob("noop") for _ in range(20)])  # other work goes on meanwhile

    def all_done() -> bool:
        producer.run_cycle()
        for host in ("h1", "h2"):
            _complete_with(engine, host, delay)
        return count_status(engine, "completed") == 25

    wait_for(all_done, scaled(20), "the site's four pages, one a second")
    with engine.connect() as conn:
        queued_at = (
            conn.execute(
                sa.text(
                    "SELECT at FROM job_events WHERE to_status = 'queued' AND job_id = ANY(:ids)"
                    " ORDER BY at"
                ),
                {"ids": pages},
            )
            .scalars()
            .all()
        )
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(queued_at)]
    assert len(gaps) == 3 and min(gaps) >= 0.95, gaps  # the producer's clock, the database's


def test_a_hostile_crawl_delay_is_bounded_and_a_bad_one_ignored(
    engine: Engine, tmp_path: Path, make_producer: Any
) -> None:
    _fleet(engine, tmp_path, h1=6)
    producer = make_producer()
    producer.run_cycle()
    submit(engine, [NewJob("crawl", {"url": f"http://{s}.test/"}) for s in ("huge", "bad")])
    producer.run_cycle()
    with engine.begin() as conn:
        claimed = {j.payload["url"]: j for j in store.claim_jobs(conn, "h1", 10).jobs}
        results = {
            "http://huge.test/": {"crawl_delay_s": 10**400},
            "http://bad.test/": {"crawl_delay_s": "soon"},
        }
        store.complete_jobs(
            conn, "h1", [(j.id, j.attempt, results[url]) for url, j in claimed.items()]
        )
    assert producer.run_cycle().error is None
    assert {k: v[0] for k, v in producer._rates.crawl_delays.items()} == {"huge.test": 60.0}
