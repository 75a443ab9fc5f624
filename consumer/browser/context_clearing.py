"""Clearing a slot's user context between two ``isolation="cleared"`` jobs, in place.

The cheap rung of the isolation ladder (common.browser.isolation): the next job keeps the
slot's warm user context and tab, so its pages find the HTTP cache and the site's renderer
process already there, as in one browser visiting many pages; what the job's pages stored is
gone. In order, off the job's path (the session pool runs it after the job returns):

1. the origins the tab's pages had: every entry of the tab's navigation history (CDP
   ``Page.getNavigationHistory``);
2. the page leaves: it navigates itself to ``about:blank`` (``location.replace``). A
   navigation the page starts keeps its origin and process, so no renderer is started for the
   next page of the same site (a WebDriver ``get`` of about:blank swaps the renderer: ~150 ms
   of CPU a job more, measured here). Its unload and pagehide handlers run now, before the
   clearing, and its timers stop with it: nothing the old page does can write after step 4;
3. the tab's sessionStorage of that origin (the blank document shares it) is cleared;
4. every cookie of the user context (BiDi ``storage.deleteCookies``, all partitions), and
   per origin of step 1 its localStorage, IndexedDB, Cache Storage, service workers, file
   systems and storage buckets (CDP ``Storage.clearDataForOrigin``); the HTTP cache stays;
5. the tab's history is emptied (CDP ``Page.resetNavigationHistory``): ``history.back()`` in
   the next job leads nowhere.

A job the in-place clearing cannot vouch for gets a fresh user context instead (the caller's
fallback; ``clear_in_place`` says why): its tab was closed or it opened another window,
its pages were on more than one origin or framed another origin (sessionStorage is per tab,
and another origin's can be cleared only from a page of that origin), or a step failed.

Measured here (one session, real pages of the PostgreSQL manual, fetch_page with one field;
tests.benchmarks.bench_contexts): a page in a reused tab ~120 ms of stack CPU, with this
clearing ~210 ms, in a fresh user context ~300 ms.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapefleet.consumer.browser import bidi

if TYPE_CHECKING:  # consumer.browser.sessions imports this module
    from scrapefleet.consumer.browser.sessions import JobContext

# Everything Storage.clearDataForOrigin can clear except the HTTP cache, which it never does.
# Cookies are deleted apart, for every domain of the user context at once.
STORAGE_TYPES = (
    "local_storage,indexeddb,cache_storage,service_workers,file_systems,websql,"
    "shared_storage,storage_buckets"
)
# The leave is asynchronous: the blank document is usually there by the next command (which
# chromedriver holds until a pending navigation ends); a page that holds on to its unload for
# longer than this gets a fresh context instead.
LEAVE_TIMEOUT_S = 2.0
LEAVE_POLL_S = 0.01

# Navigates away after returning, so that the answer is not lost with the document; counts
# the frames of another origin at any depth (a frame of ours may hold one; a frame whose
# location cannot be read is another origin's, and its own frames are counted with it).
_LEAVE_JS = """
const foreignIn = (win) => {
  let found = 0;
  for (let i = 0; i < win.frames.length; i++) {
    try {
      const frame = win.frames[i];
      found += frame.location.origin !== location.origin ? 1 : foreignIn(frame);
    } catch (error) { found++; }
  }
  return found;
};
const foreign = foreignIn(window);
setTimeout(() => location.replace("about:blank"), 0);
return {foreign_frames: foreign};
"""
_CLEAR_SESSION_STORAGE_JS = """
if (location.href !== "about:blank") return false;
try { sessionStorage.clear(); } catch (error) {}
return true;
"""


def origin_of(url: str) -> str | None:
    """scheme://host[:port] of an http(s) URL; None for about:, data: and the like, which
    store nothing of their own."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def visited_origins(history: dict[str, Any]) -> set[str]:
    """The origins of a Page.getNavigationHistory answer's entries."""
    found = set()
    for entry in history.get("entries") or []:
        origin = origin_of(str(entry.get("url", "")))
        if origin is not None:
            found.add(origin)
    return found


def clear_in_place(driver: Any, context: JobContext, handles: list[str]) -> str | None:
    """Clear what the last job stored in ``context``, keeping its tab; ``handles`` are the
    session's window handles now. None once cleared; else why the context must be replaced
    instead (the caller does so). Raises nothing."""
    if frozenset(handles) != context.windows:
        return "the job closed its tab or opened another window"
    tab, user_context = context.tab, context.user_context
    try:
        if driver.current_window_handle != tab:
            driver.switch_to.window(tab)
        origins = visited_origins(driver.execute_cdp_cmd("Page.getNavigationHistory", {}))
        if len(origins) > 1:
            return "the job's pages were on more than one origin"
        left = driver.execute_script(_LEAVE_JS) if origins else {"foreign_frames": 0}
        if not isinstance(left, dict) or left.get("foreign_frames") != 0:
            return "the job's page framed another origin"
        if origins and not _wait_until_blank(driver):
            return f"the page did not leave within {LEAVE_TIMEOUT_S:g} s"
        bidi.command(
            driver,
            "storage.deleteCookies",
            {"partition": {"type": "storageKey", "userContext": user_context}},
        )
        for origin in origins:
            driver.execute_cdp_cmd(
                "Storage.clearDataForOrigin", {"origin": origin, "storageTypes": STORAGE_TYPES}
            )
        driver.execute_cdp_cmd("Page.resetNavigationHistory", {})
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        return f"clearing failed: {type(exc).__name__}: {lines[0] if lines else ''}"
    return None


def _wait_until_blank(driver: Any) -> bool:
    """Clear the blank document's sessionStorage once it is there; False if it never comes."""
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    while True:
        if driver.execute_script(_CLEAR_SESSION_STORAGE_JS) is True:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(LEAVE_POLL_S)
