"""Clearing a slot's user context between two ``isolation="cleared"`` jobs, in place.

The cheap rung of the isolation ladder (common.browser.isolation): the next job keeps the
slot's warm user context and tab, so its pages find the HTTP cache and the site's renderer
process already there, as in one browser visiting many pages; what the job's pages stored is
gone. In order, off the job's path (the session pool runs it after the job returns):

1. the page leaves: it navigates itself to ``about:blank`` (``location.replace``). A
   navigation the page starts keeps its origin and process, so no renderer is started for the
   next page of the same site (a WebDriver ``get`` of about:blank swaps the renderer: ~150 ms
   of CPU a job more, measured here). Its unload and pagehide handlers run now, before the
   clearing, and its timers stop with it: nothing the old page does can write after step 3;
2. on the blank document (which keeps the page's origin, its sessionStorage and its history,
   and runs no code of the page's): the tab's sessionStorage is cleared, and one script reads
   the history's length and whether the origin holds anything (localStorage keys, IndexedDB
   databases, the quota manager's usage: IndexedDB, Cache Storage, service workers, file
   systems, buckets' data);
3. every cookie of the user context (BiDi ``storage.deleteCookies``, all partitions), and,
   when step 2 found anything, the origin's localStorage, IndexedDB, Cache Storage, service
   workers, file systems and storage buckets (CDP ``Storage.clearDataForOrigin``); the HTTP
   cache stays;
4. when the job left more history than its one entry (it followed links, went back), the
   origins of every entry (CDP ``Page.getNavigationHistory``) are cleared too and the history
   is emptied (CDP ``Page.resetNavigationHistory``): ``history.back()`` in the next job leads
   to nothing of this one's. A job that made one entry leaves an ``about:blank`` of its
   origin behind it (its page was replaced), which holds nothing.

A job that stored nothing and loaded one page costs five round trips here (window handles,
window switch, leave, the blank document's script, cookies), where every step unconditionally
cost eight; a job that stored something, six.

A job the in-place clearing cannot vouch for gets a fresh user context instead (the caller's
fallback; ``clear_in_place`` says why): its tab was closed or it opened another window,
its pages were on more than one origin or framed another origin (sessionStorage is per tab,
and another origin's can be cleared only from a page of that origin), or a step failed.

Measured here (one session, 60 real pages of the PostgreSQL manual, fetch_page with one field;
``tests.benchmarks.bench_contexts --real``): a page in a reused tab ~100 ms of stack CPU; with
this clearing ~150 ms, whether every step ran on every job (11 round trips a job) or only
those it needs (8): the round trips cost a few ms, the leave alone adds 50-65 ms to the browser
and renderer processes, with BiDi on or off. In a fresh user context ~270-300 ms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapefleet.common.error_lines import first_line
from scrapefleet.consumer.browser.sessions import bidi
from scrapefleet.consumer.browser.sessions.session_operations import JobContext

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
# On the blank document: nothing of the page's runs here, so what it reads is the truth. The
# origin is the page's (an about:blank the page navigated to inherits it; ``location.origin``
# says "null" there, ``self.origin`` does not). Service workers cannot be listed from
# about:blank ("invalid state"), but a registration's scripts count in the quota manager's usage.
# Anything that cannot be read counts as stored: the origin is cleared then.
_BLANK_JS = """
if (location.href !== "about:blank") return null;
try { sessionStorage.clear(); } catch (error) {}
return (async () => {
  const holds = async (read) => { try { return await read(); } catch (error) { return true; } };
  const stored = await holds(() => localStorage.length > 0)
    || await holds(async () => (await indexedDB.databases()).length > 0)
    || await holds(async () => (await navigator.storage.estimate()).usage !== 0)
    || typeof sharedStorage !== "undefined";
  return {origin: self.origin, history: history.length, stored: stored};
})();
"""


@dataclass(frozen=True)
class Clearing:
    """What clearing a slot came to: ``why`` not (None once cleared), and the tab's history
    length afterwards, which the next clearing compares with (None: not known)."""

    why: str | None
    history_length: int | None = None


@dataclass(frozen=True)
class BlankDocument:
    origin: str | None
    history_length: int
    stored: bool


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


def clear_in_place(
    driver: Any, context: JobContext, handles: list[str], history_before: int | None = None
) -> Clearing:
    """Clear what the last job stored in ``context``, keeping its tab; ``handles`` are the
    session's window handles now, ``history_before`` the tab's history length after the last
    clearing (None: unknown, the whole history is read and emptied). Raises nothing: a
    Clearing whose ``why`` says why the context must be replaced instead (the caller does so)."""
    if frozenset(handles) != context.windows:
        return Clearing("the job closed its tab or opened another window")
    try:
        # Also back to the top of the tab, out of any frame the job switched into.
        driver.switch_to.window(context.tab)
        left = driver.execute_script(_LEAVE_JS)
        if not isinstance(left, dict) or left.get("foreign_frames") != 0:
            return Clearing("the job's page framed another origin")
        blank = _wait_until_blank(driver)
        if blank is None:
            return Clearing(f"the page did not leave within {LEAVE_TIMEOUT_S:g} s")
        origins = {blank.origin} if blank.origin is not None else set()
        whole_history = history_before is None or blank.history_length > history_before + 1
        if whole_history:
            history = driver.execute_cdp_cmd("Page.getNavigationHistory", {})
            origins |= visited_origins(history)
            if len(origins) > 1:
                return Clearing("the job's pages were on more than one origin")
        bidi.command(
            driver,
            "storage.deleteCookies",
            {"partition": {"type": "storageKey", "userContext": context.user_context}},
        )
        # The history's other origins were not asked what they hold: they are cleared anyway.
        for origin in origins if blank.stored or whole_history else ():
            driver.execute_cdp_cmd(
                "Storage.clearDataForOrigin", {"origin": origin, "storageTypes": STORAGE_TYPES}
            )
        if whole_history:
            driver.execute_cdp_cmd("Page.resetNavigationHistory", {})
            return Clearing(None, 1)
    except Exception as exc:
        return Clearing(f"clearing failed: {first_line(exc, named=True)}")
    return Clearing(None, blank.history_length)


def _wait_until_blank(driver: Any) -> BlankDocument | None:
    """The blank document's reading (its sessionStorage cleared) once it is there; None if it
    never comes."""
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    while True:
        found = driver.execute_script(_BLANK_JS)
        if isinstance(found, dict):
            return blank_document(found)
        if time.monotonic() >= deadline:
            return None
        time.sleep(LEAVE_POLL_S)


def blank_document(found: dict[str, Any]) -> BlankDocument:
    """The blank document's script's answer, checked (ValueError when it is not one)."""
    history, stored = found.get("history"), found.get("stored")
    if not isinstance(history, int) or isinstance(history, bool) or history < 1:
        raise ValueError(f"the blank document's history length is {history!r}")
    if not isinstance(stored, bool):
        raise ValueError(f"the blank document's stored flag is {stored!r}")
    origin = origin_of(str(found.get("origin", "")))
    return BlankDocument(origin=origin, history_length=history, stored=stored)
