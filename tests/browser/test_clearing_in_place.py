"""Clearing a slot in place (isolation "cleared") on a real Grid and Chromium: each kind of
storage a job's page can write, alone, is gone for the next job of the slot, which keeps the
same tab; the history the next job can go back through holds nothing of the job before.

Alone, because the clearing asks the origin what it holds before clearing it: a job that
stored only one kind must not read as having stored nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scrapefleet.consumer.browser.sessions.context_clearing import blank_document
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from tests.browser.conftest import grid_session_ids
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

# Each resolves once the value is stored (a script that returns a promise is awaited).
WRITES = {
    "localStorage": "localStorage.setItem('kept', '1');",
    "IndexedDB": """
        await new Promise((stored, failed) => {
          const opened = indexedDB.open('kept', 1);
          opened.onupgradeneeded = () => opened.result.createObjectStore('records');
          opened.onerror = failed;
          opened.onsuccess = () => {
            const tx = opened.result.transaction('records', 'readwrite');
            tx.objectStore('records').put('1', 'key');
            tx.oncomplete = () => { opened.result.close(); stored(); };
          };
        });""",
    "Cache Storage": "await (await caches.open('kept')).put('/kept', new Response('1'));",
    "origin private file system": """
        await (await navigator.storage.getDirectory()).getFileHandle('kept', {create: true});""",
    "service worker": """
        await navigator.serviceWorker.register('/worker.js');
        await navigator.serviceWorker.ready;""",
    "cookie": "document.cookie = 'kept=1; max-age=3600';",
    "sessionStorage": "sessionStorage.setItem('kept', '1');",
}
READ_JS = """
return (async () => {
  let files = 0;
  for await (const name of (await navigator.storage.getDirectory()).keys()) files++;
  return {
    "localStorage": localStorage.length,
    "IndexedDB": (await indexedDB.databases()).length,
    "Cache Storage": (await caches.keys()).length,
    "origin private file system": files,
    "service worker": (await navigator.serviceWorker.getRegistrations()).length,
    "cookie": document.cookie.length,
    "sessionStorage": sessionStorage.length,
  };
})();
"""
NOTHING = dict.fromkeys(WRITES, 0)


@pytest.fixture
def pool(pool_stack: BrowserStack) -> Iterator[SessionPool]:
    one = SessionPool(pool_stack.new_driver, 1)
    yield one
    one.close()
    wait_for(lambda: not grid_session_ids(pool_stack), 15, "the pool's session to end")


@pytest.mark.parametrize("kind", WRITES)
def test_each_kind_of_storage_alone_is_gone_for_the_next_job(
    pool: SessionPool, site: LocalSite, kind: str
) -> None:
    # The slot's first clearing reads and empties the whole history and clears every origin
    # in it whatever it holds; from the second on, an origin that holds nothing is left alone.
    with pool.lease("cleared") as driver:
        driver.get(site.url("/plain"))
    with pool.lease("cleared") as driver:
        driver.get(site.url("/plain"))
        tab = driver.current_window_handle
        assert driver.execute_script(READ_JS) == NOTHING
        driver.execute_script(f"return (async () => {{ {WRITES[kind]} return true; }})();")
        written = driver.execute_script(READ_JS)
        assert written[kind] > 0, f"the job's own {kind} was not there to clear"

    with pool.lease("cleared") as driver:
        assert driver.current_window_handle == tab  # cleared in place, not a fresh context
        driver.get(site.url("/plain"))
        assert driver.execute_script(READ_JS) == NOTHING, f"{kind} reached the next job"
    assert pool.replaced == 0


def urls_back_through_history(driver: Any) -> list[str]:
    """Every earlier entry of the tab's history, from the newest back to the first (WebDriver's
    back returns once the entry is loaded)."""
    seen = []
    for _ in range(driver.execute_script("return history.length") - 1):
        driver.back()
        seen.append(driver.current_url)
    return seen


@pytest.mark.parametrize("pages", [1, 3])
def test_the_next_job_cannot_go_back_to_the_pages_of_the_job_before(
    pool: SessionPool, site: LocalSite, pages: int
) -> None:
    """One page: its entry is replaced by a blank one, nothing else to do; several: the
    history is emptied. Each job first walks back through all the history it was given."""
    tabs = set()
    for job in range(4):
        with pool.lease("cleared") as driver:
            tabs.add(driver.current_window_handle)
            earlier = urls_back_through_history(driver)
            assert set(earlier) <= {"about:blank"}, f"job {job} could go back to {earlier}"
            for page in range(pages):
                driver.get(site.url(f"/plain?job={job}&page={page}"))
    assert len(tabs) == 1 and pool.replaced == 0  # cleared in place every time


def test_a_blank_documents_answer_is_checked() -> None:
    good = {"origin": "http://127.0.0.1:8080", "history": 3, "stored": False}
    assert blank_document(good).origin == "http://127.0.0.1:8080"
    assert blank_document({**good, "origin": "null"}).origin is None
    for bad in ({"history": 0}, {"history": True}, {"history": "3"}, {"stored": 1}):
        with pytest.raises(ValueError, match="blank document"):
            blank_document({**good, **bad})
