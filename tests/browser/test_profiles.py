"""Profiles on the real stack, with the real producer: a profile's login cookie is there in its
next job, in a browser of its own on its directory, and in no other job; two jobs of one
profile never run at once, though the host has slots for them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.browser.consumer_helpers import HOST, consumer_settings, consumer_thread, finished, rows
from tests.browser.login_site import LoginSite
from tests.browser.recording_proxy import RecordingProxy
from tests.integration.producer_helpers import producer_settings
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def login_site() -> Iterator[LoginSite]:
    with LoginSite() as site:
        yield site


@contextmanager
def fleet_of_one(
    tmp_path: Path, database_url: str, engine: Engine, **overrides: Any
) -> Iterator[Settings]:
    """A consumer of three slots and the producer that feeds it (its status file read locally)."""
    settings = consumer_settings(tmp_path, database_url, capacity=3, restart_every=0, **overrides)
    with consumer_thread(settings, database_url):
        producer = Producer(producer_settings(database_url, settings.state_dir), engine)
        producer.start()
        try:
            yield settings
        finally:
            producer.stop()


def page(url: str, profile: str | list[str] | None = None) -> NewJob:
    payload: dict[str, Any] = {"url": url}
    if profile is not None:
        payload["browser"] = {"profile": profile}
    return NewJob("fetch_page", payload, max_attempts=1)


def run(engine: Engine, jobs: list[NewJob]) -> list[Any]:
    """Submit (pending: the producer assigns them), wait, and return their rows in order."""
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, jobs, default_max_attempts=1).ids
    wait_for(lambda: finished(engine, ids), 180, f"jobs {ids}")
    found = rows(
        engine,
        "SELECT id, status, result, last_error, profile, started_at, finished_at FROM jobs"
        " WHERE id = ANY(:ids) ORDER BY id",
        ids=ids,
    )
    for row in found:
        assert row.status == "completed", row.last_error
    return found


def test_a_profiles_login_is_there_in_its_next_job_and_in_no_other(
    engine: Engine, database_url: str, tmp_path: Path, login_site: LoginSite
) -> None:
    whoami = login_site.url("/whoami")
    with fleet_of_one(tmp_path, database_url, engine) as settings:
        [login] = run(engine, [page(login_site.url("/login?as=alice"), "acct-a")])
        later, other, plain = run(
            engine, [page(whoami, "acct-a"), page(whoami, "acct-b"), page(whoami)]
        )
        [again] = run(engine, [page(whoami, ["acct-a"])])  # a pool of one: the same profile

    assert login.result["title"] == "logged in alice"
    assert later.result["title"] == "who: alice"  # the next job of the profile: still logged in
    assert again.result["title"] == "who: alice"
    assert other.result["title"] == "who: nobody"  # another profile
    assert plain.result["title"] == "who: nobody"  # a job with none
    assert (login.profile, later.profile, other.profile, plain.profile) == (
        "acct-a",
        "acct-a",
        "acct-b",
        None,
    )
    directory = settings.state_dir / "profiles" / "acct-a"
    assert (directory / "Default").is_dir()  # Chromium's profile, kept on the host
    assert not (directory / "SingletonLock").is_symlink()  # its browser ended with its job
    with engine.connect() as conn:
        listed = {r["name"]: r for r in store.list_profiles(conn)}
    assert listed["acct-a"]["host"] == HOST and listed["acct-a"]["jobs"] == 3


def test_two_jobs_of_one_profile_never_overlap(
    engine: Engine, database_url: str, tmp_path: Path, login_site: LoginSite
) -> None:
    slow = login_site.url("/whoami?wait=1")
    with fleet_of_one(tmp_path, database_url, engine):
        done = run(engine, [page(slow, "acct-o") for _ in range(3)] + [page(slow), page(slow)])

    profiled = sorted(done[:3], key=lambda r: r.started_at)
    for before, after in itertools.pairwise(profiled):
        assert after.started_at >= before.finished_at, (before, after)
    # The host had the slots to run them together: the jobs without a profile did overlap
    # with the profile's (so its jobs waited for each other, not for a slot).
    plain = done[3:]
    assert any(
        p.started_at < q.finished_at and q.started_at < p.finished_at
        for p in plain
        for q in profiled
    )


def test_stale_singleton_locks_of_a_killed_browser_are_removed(
    engine: Engine, database_url: str, tmp_path: Path, login_site: LoginSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=3, restart_every=0)
    directory = settings.state_dir / "profiles" / "acct-k"
    directory.mkdir(parents=True)
    # What a browser killed mid-job leaves: a lock naming a process that is gone.
    (directory / "SingletonLock").symlink_to("somehost-999999")
    (directory / "SingletonCookie").symlink_to("123")
    with fleet_of_one(tmp_path, database_url, engine):
        [job] = run(engine, [page(login_site.url("/login?as=kim"), "acct-k")])
    assert job.result["title"] == "logged in kim"
    assert not (directory / "SingletonCookie").is_symlink()


def test_a_blocked_pool_job_completes_through_another_profile_and_the_first_cools_down(
    engine: Engine, database_url: str, tmp_path: Path, login_site: LoginSite
) -> None:
    guarded = login_site.url("/guarded")
    block_rules = {"block_statuses": [403], "profile_block_cooldown_s": 600.0}
    with fleet_of_one(tmp_path, database_url, engine, **block_rules):
        run(
            engine,
            [
                page(login_site.url("/login?as=banned"), "acct-1"),
                page(login_site.url("/login?as=fine"), "acct-2"),
            ],
        )
        [job] = run(engine, [page(guarded, ["acct-1", "acct-2"])])

    assert job.profile == "acct-2" and job.result["title"] == "who: fine"
    [row] = rows(
        engine, "SELECT attempts, blocks, blocked_on_host FROM jobs WHERE id = :id", id=job.id
    )
    assert (row.attempts, row.blocks, row.blocked_on_host) == (1, 1, HOST)  # no attempt used
    with engine.connect() as conn:
        listed = {r["name"]: r for r in store.list_profiles(conn)}
    assert listed["acct-1"]["state"] == "cooling" and listed["acct-1"]["blocks"] == 1
    assert listed["acct-1"]["cooldown_until"] > job.finished_at  # still cooling
    assert listed["acct-2"]["blocks"] == 0


def test_a_profile_behind_a_proxy_keeps_its_login_and_every_request_goes_through_it(
    engine: Engine, database_url: str, tmp_path: Path, login_site: LoginSite
) -> None:
    with RecordingProxy("scraper", "s3cret") as proxy:
        # Named, not 127.0.0.1: Chromium sends no loopback address through a proxy, and the
        # proxy resolves *.test to 127.0.0.1.
        login, whoami = (login_site.url(p, host="shop.test") for p in ("/login?as=pat", "/whoami"))
        with fleet_of_one(tmp_path, database_url, engine):
            first, second = (
                run(engine, [page_via(url, "acct-p", proxy.url())])[0] for url in (login, whoami)
            )

    assert first.result["title"] == "logged in pat"
    assert second.result["title"] == "who: pat"  # the profile's cookie, through the proxy
    assert proxy.requests_to("/login") and proxy.requests_to("/whoami")
    assert proxy.challenged >= 1 and all(s.header("Proxy-Authorization") for s in proxy.seen)


def page_via(url: str, profile: str, proxy: str) -> NewJob:
    return NewJob("fetch_page", {"url": url, "browser": {"profile": profile, "proxy": proxy}})
