"""The session pool on a real Grid and Chromium: fresh contexts per job, dead sessions replaced,
the cap on sessions, own sessions for isolation="session"."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common.browser.isolation import ISOLATION_VALUES, Isolation
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.actions.selenium_actions import (
    FetchPageParams,
    ScreenshotParams,
    fetch_page,
    navigate,
    screenshot,
)
from scrapefleet.consumer.browser.sessions.session_operations import quit_driver
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, session_profile_dir
from scrapefleet.consumer.browser.stack.processes import (
    end_processes_naming,
    is_gone,
    processes_naming,
)
from tests.browser.conftest import grid_session_ids
from tests.browser.site import LocalSite
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

MakePool = Callable[..., SessionPool]


@pytest.fixture
def make_pool(pool_stack: BrowserStack) -> Iterator[MakePool]:
    pools: list[SessionPool] = []

    def make(size: int, make_driver: Any = None, **options: Any) -> SessionPool:
        pool = SessionPool(make_driver or pool_stack.new_driver, size, **options)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()
    wait_for(lambda: not grid_session_ids(pool_stack), 15, "the pools' sessions to end")


def fetch_cached(driver: Any) -> int:
    """Fetch /cached from the page, through the browser's HTTP cache; the response status."""
    status: int = driver.execute_script(
        "return fetch('/cached').then((response) => response.status);"
    )
    return status


def delete_behind_the_pools_back(stack: BrowserStack, session_id: str) -> None:
    with stack.grid_open(f"/session/{session_id}", method="DELETE", timeout=30) as response:
        assert response.status == 200


def kill_its_browser(driver: Any) -> None:
    """SIGKILL the Chromium of one session, found by the profile chromedriver reported."""
    profile = Path(driver.capabilities["chrome"]["userDataDir"])
    assert end_processes_naming(profile, 10.0) > 0


def test_isolation_values_are_the_ladder_cheapest_first() -> None:
    assert ISOLATION_VALUES == ("shared", "cleared", "context", "session")


@pytest.mark.parametrize("isolation", ["cleared", "context"])
def test_nothing_set_by_one_job_reaches_the_next_on_the_same_session(
    make_pool: MakePool, site: LocalSite, isolation: Isolation
) -> None:
    pool = make_pool(1)
    with pool.lease(isolation) as driver:
        first_session = driver.session_id
        driver.get(site.url("/plain"))
        driver.add_cookie({"name": "visitor", "value": "42"})
        driver.execute_script("localStorage.setItem('cart', 'full')")
        driver.execute_script("sessionStorage.setItem('step', '3')")
        hits = site.cached_hits
        assert fetch_cached(driver) == fetch_cached(driver) == 200
        # The job saw its own state: the next job's clean slate below is not a blind test.
        assert [c["name"] for c in driver.get_cookies()] == ["visitor"]
        assert driver.execute_script("return localStorage.getItem('cart')") == "full"
        assert site.cached_hits == hits + 1  # the second fetch came from the HTTP cache

    with pool.lease(isolation) as driver:
        assert driver.session_id == first_session  # the same warm browser
        driver.get(site.url("/plain"))
        assert driver.get_cookies() == []
        assert driver.execute_script("return localStorage.getItem('cart')") is None
        assert driver.execute_script("return sessionStorage.getItem('step')") is None
        assert fetch_cached(driver) == 200
        # "cleared" keeps the HTTP cache, as one browser visiting many pages; "context" not.
        assert site.cached_hits == hits + (1 if isolation == "cleared" else 2)
    assert pool.replaced == 0


def test_tabs_a_job_opens_are_closed_with_its_context(make_pool: MakePool, site: LocalSite) -> None:
    pool = make_pool(1)
    with pool.lease() as driver:
        driver.get(site.url("/plain"))
        driver.execute_script("window.open('/item'); window.open('/long');")
        wait_for(lambda: len(driver.window_handles) >= 4, 10, "the job's popups")
    with pool.lease() as driver:
        # The session's own first tab and the new job's tab, nothing of the last job.
        assert len(driver.window_handles) == 2
        assert driver.current_url == "about:blank"


@pytest.mark.parametrize("kill", ["quit behind the pool's back", "SIGKILL of its Chromium"])
def test_a_session_killed_between_jobs_is_replaced_and_the_next_job_runs(
    make_pool: MakePool, pool_stack: BrowserStack, site: LocalSite, kill: str
) -> None:
    pool = make_pool(1)
    with pool.lease() as driver:
        fetch_page(driver, FetchPageParams(url=site.url("/plain")))
        victim = driver
    wait_for(lambda: pool.prepared == 1, 30, "the next context to be ready")
    if kill.startswith("quit"):
        delete_behind_the_pools_back(pool_stack, victim.session_id)
    else:
        kill_its_browser(victim)

    with pool.lease() as driver:
        assert driver.session_id != victim.session_id
        result = fetch_page(driver, FetchPageParams(url=site.url("/item")))
        assert result["title"] == "Widget 42" and result["status"] == 200
    assert pool.replaced == 1
    wait_for(
        lambda: victim.session_id not in grid_session_ids(pool_stack), 15, "the dead one to go"
    )


def test_a_session_that_dies_in_a_job_fails_that_job_only(
    make_pool: MakePool, pool_stack: BrowserStack, site: LocalSite
) -> None:
    pool = make_pool(1)
    with pool.lease() as driver:
        victim = driver.session_id
        kill_its_browser(driver)
        with pytest.raises(StackError, match="session lost"):
            fetch_page(driver, FetchPageParams(url=site.url("/plain")))
    with pool.lease() as driver:  # replaced in the background, or here at the latest
        assert driver.session_id != victim
        assert fetch_page(driver, FetchPageParams(url=site.url("/plain")))["title"] == "Plain"
    assert pool.replaced == 1


def test_a_crashed_tab_costs_its_job_only(make_pool: MakePool, site: LocalSite) -> None:
    pool = make_pool(1)
    with pool.lease() as driver:
        session = driver.session_id
        with pytest.raises(Exception, match="crash"):
            navigate(driver, "chrome://crash")
    with pool.lease() as driver:
        assert fetch_page(driver, FetchPageParams(url=site.url("/plain")))["title"] == "Plain"
        assert driver.session_id == session
    assert pool.replaced == 0


def test_isolation_session_gets_a_browser_of_its_own(
    make_pool: MakePool, pool_stack: BrowserStack, site: LocalSite
) -> None:
    pool = make_pool(2)
    with pool.lease() as driver:
        warm = driver.session_id
    with pool.lease("session") as driver:
        own = driver.session_id
        assert own != warm and own not in set(pool.session_ids()) - {own}
        assert fetch_page(driver, FetchPageParams(url=site.url("/plain")))["status"] == 200
        assert {own, warm} <= grid_session_ids(pool_stack)
    wait_for(lambda: own not in grid_session_ids(pool_stack), 15, "the job's own session to end")
    assert pool.session_ids() == [warm]
    with pool.lease() as driver:
        assert driver.session_id == warm


def test_a_quit_returns_once_the_sessions_browser_has_exited(
    pool_stack: BrowserStack, site: LocalSite
) -> None:
    """The pool frees a session's permit when its quit returns: were the browser still exiting
    then, the next session's would run beside it, one more than the host's capacity."""
    for _ in range(3):  # Chromium's linger after a quit varies; each round must hold
        driver = pool_stack.new_driver()
        driver.get(site.url("/plain"))
        profile = session_profile_dir(driver)
        assert profile is not None
        browser = processes_naming(profile)
        assert browser, "no process names the session's profile directory"
        quit_driver(driver)
        assert [p.pid for p in browser if not is_gone(p)] == []
        assert processes_naming(profile) == []


def test_an_unknown_isolation_is_refused(make_pool: MakePool) -> None:
    pool = make_pool(1)
    with (
        pytest.raises(
            ValueError, match="isolation must be one of shared, cleared, context, session"
        ),
        pool.lease(
            "profile"  # type: ignore[arg-type]
        ),
    ):
        pass


class CountedSessions:
    """A driver factory that counts the sessions in existence, from the start of their
    creation to the end of their deletion: an upper bound on what the Grid holds, kept outside
    the pool's own bookkeeping."""

    def __init__(self, stack: BrowserStack) -> None:
        self.stack = stack
        self.lock = threading.Lock()
        self.now = self.peak = self.created = 0

    def _moved(self, by: int) -> None:
        with self.lock:
            self.now += by
            self.peak = max(self.peak, self.now)

    def __call__(self) -> Any:
        self._moved(+1)
        try:
            driver = self.stack.new_driver()
        except BaseException:
            self._moved(-1)
            raise
        self.created += 1
        quit_session = driver.quit

        def quit_counted() -> None:
            try:
                quit_session()
            finally:
                self._moved(-1)

        driver.quit = quit_counted
        return driver


def test_never_more_sessions_than_size_under_concurrent_leases(
    pool_stack: BrowserStack, site: LocalSite
) -> None:
    size, jobs = 3, 14
    sessions = CountedSessions(pool_stack)
    pool = SessionPool(sessions, size)
    lock = threading.Lock()
    leased_now = peak_leases = 0
    done: list[str] = []
    errors: list[BaseException] = []
    together = threading.Barrier(size, timeout=scaled(60))  # the first jobs overlap for sure

    def job(n: int) -> None:
        nonlocal leased_now, peak_leases
        isolation = "session" if n % 4 == 3 else "context"
        try:
            with pool.lease(isolation) as driver:  # type: ignore[arg-type]
                with lock:
                    leased_now += 1
                    peak_leases = max(peak_leases, leased_now)
                try:
                    if n < size:
                        together.wait()
                    result = fetch_page(driver, FetchPageParams(url=site.url(f"/item?n={n}")))
                finally:
                    with lock:
                        leased_now -= 1
                done.append(result["final_url"])
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=job, args=(n,), daemon=True) for n in range(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(100)
    finally:
        pool.close()
    assert errors == []
    assert len(done) == jobs
    assert peak_leases == size  # the jobs overlapped up to the cap and no further
    # Four own sessions came and went beside the warm ones, never above the cap (the Grid
    # would have allowed POOL_STACK_CAPACITY).
    assert sessions.created >= size + 1
    assert sessions.peak == size
    assert sessions.now == 0 and pool.sessions_alive == 0


def test_warm_starts_sessions_that_the_next_leases_use(
    pool_stack: BrowserStack, make_pool: MakePool
) -> None:
    sessions = CountedSessions(pool_stack)
    pool = make_pool(3, make_driver=sessions)
    assert pool.warm(2) == 2
    wait_for(lambda: pool.prepared == 2, 60, "two warm sessions")
    warmed = set(pool.session_ids())
    with pool.lease() as first, pool.lease() as second:
        assert {first.session_id, second.session_id} == warmed
    assert sessions.created == 2  # no session started in a lease
    assert pool.warm(5) == 1  # only the one empty slot is left


def test_close_ends_every_session_and_refuses_leases(
    make_pool: MakePool, pool_stack: BrowserStack
) -> None:
    pool = make_pool(2)
    with pool.lease() as first, pool.lease() as second:
        ids = {first.session_id, second.session_id}
    with pool.lease() as kept:
        assert kept.session_id in ids
        pool.close()  # this lease's session ends when the job returns
        assert pool.session_ids() == [kept.session_id]
        wait_for(
            lambda: not ids - {kept.session_id} & grid_session_ids(pool_stack),
            15,
            "the idle session to end",
        )
        assert kept.session_id in grid_session_ids(pool_stack)
    assert pool.sessions_alive == 0
    wait_for(lambda: not ids & grid_session_ids(pool_stack), 15, "the leased session to end")
    with pytest.raises(StackError, match="closed"), pool.lease():
        pass


def test_actions_run_in_a_leased_context(
    make_pool: MakePool, site: LocalSite, tmp_path: Path
) -> None:
    pool = make_pool(1)
    with pool.lease() as driver:
        result = screenshot(driver, ScreenshotParams(url=site.url("/long"), output_dir=tmp_path))
        assert result["height"] > 4000 and result["title"] == "Long"  # CDP in the job's tab
    with pool.lease() as driver:
        params = FetchPageParams.model_validate(
            {
                "url": site.url("/redirect"),
                "wait_for": "#late",
                "fields": {"late": {"css": "#late"}},
            }
        )
        fetched = fetch_page(driver, params)
        assert fetched["final_url"] == site.url("/item") and fetched["fields"] == {
            "late": "arrived"
        }


def test_idle_sessions_outlive_the_grids_session_timeout_when_kept_alive(
    settings: Any, site: LocalSite, tmp_path: Path
) -> None:
    quick = settings.model_copy(update={"grid_session_timeout_s": 10})
    with BrowserStack(quick, "reaping", 2, tmp_path / "stack") as stack:
        kept = SessionPool(stack.new_driver, 1, keepalive_s=3.0)
        left = SessionPool(stack.new_driver, 1)
        try:
            with kept.lease() as driver:
                kept_id = driver.session_id
            with left.lease() as driver:
                left_id = driver.session_id
            # The Grid reaps the session nobody touches...
            wait_for(lambda: left_id not in grid_session_ids(stack), 60, "the Grid to reap one")
            assert kept_id in grid_session_ids(stack)  # ...and not the one kept alive
            with kept.lease() as driver:
                assert driver.session_id == kept_id
                assert fetch_page(driver, FetchPageParams(url=site.url("/plain")))["status"] == 200
            with left.lease() as driver:  # a reaped session is replaced, not a failed job
                assert driver.session_id != left_id
            assert (kept.replaced, left.replaced) == (0, 1)
        finally:
            kept.close()
            left.close()


def test_a_session_is_retired_after_its_job_budget_and_its_grid_stays(
    make_pool: MakePool, pool_stack: BrowserStack, site: LocalSite
) -> None:
    """Browsers are what leaks: after two jobs a slot's session is quit and a new one runs the
    third, in the same Grid (the JVM's pid is unchanged); 0 never retires."""
    grid_pids = {p.pid for p in pool_stack.processes() if p.name() == "java"}
    pool = make_pool(1)
    pool.retire_sessions_after(2)
    sessions = []
    for _ in range(5):
        with pool.lease() as driver:
            driver.get(site.url("/plain"))
            sessions.append(driver.session_id)
    # The slot's successor starts off the jobs' path; wait for it before reading the counts.
    wait_for(lambda: pool.retired == 2 and pool.prepared == 1, 30, "the successor")
    assert sessions[0] == sessions[1] != sessions[2] == sessions[3] != sessions[4]
    assert sessions[0] != sessions[4]
    # The retired sessions are gone from the Grid: only the slot's current one is left.
    wait_for(lambda: grid_session_ids(pool_stack) == {sessions[4]}, 15, "retired sessions gone")
    assert {p.pid for p in pool_stack.processes() if p.name() == "java"} == grid_pids
    assert pool.replaced == 0

    with pytest.raises(ValueError, match="negative"):
        pool.retire_sessions_after(-1)
