"""Where a browser job's CPU goes: a page in a reused tab against a fresh BiDi user context.

    .venv/bin/python -m tests.benchmarks.bench_contexts [--pages 30] [--flag=--some-chrome-flag]

One browser stack (Xvfb, Grid, Chromium), one session, the local test site's small page,
one job at a time: first the same tab reused for every page (the plain loop), then a fresh user
context with its own tab for every page, removed after it (what a consumer does per job).
Prints wall time and the CPU of the stack's processes per page, by process type (psutil; the
CPU of renderers that exited is counted through their parent), and how many renderers each
context started. ``--flag`` adds a Chromium flag to try (repeatable): compare two runs. Also
measures one stack start and six sessions with their first context (a restart's cost at
capacity 6). Never passes or fails on figures.
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psutil

from scrapefleet.consumer.browser.actions.selenium_actions import FetchPageParams, fetch_page
from scrapefleet.consumer.browser.sessions.session_operations import (
    close_context,
    open_context,
    quit_driver,
    tune_bidi,
)
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack import grid_driver as stack_driver
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from tests.benchmarks.bench_browser import pages, settings_for
from tests.benchmarks.doc_site import DocSite
from tests.benchmarks.round_trips import counted_round_trips
from tests.browser.site import LocalSite

SESSIONS_AT_A_RESTART = 6


def kind_of(process: psutil.Process) -> str | None:
    """The stack process's kind: browser, renderer, gpu-process, ..., java, Xvfb."""
    cmdline = process.cmdline()
    if not cmdline:
        return None
    name = Path(cmdline[0]).name
    if name == "chromium":
        found = re.search(r"--type=(\S+)", " ".join(cmdline))
        return found[1] if found else "browser"
    return name if name in ("chromedriver", "java", "Xvfb") else None


def cpu_by_kind(stack: BrowserStack) -> collections.defaultdict[str, float]:
    totals: collections.defaultdict[str, float] = collections.defaultdict(float)
    for process in stack.processes():
        try:
            kind = kind_of(process)
            if kind is not None:
                times = process.cpu_times()
                totals[kind] += times.user + times.system + times.children_user
                totals[kind] += times.children_system
        except psutil.Error:  # gone meanwhile
            continue
    return totals


@contextmanager
def new_renderers(stack: BrowserStack) -> Iterator[set[int]]:
    """The renderer processes started while the block runs (polled every 10 ms)."""
    seen = {p.pid for p in stack.processes()}
    started: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.01):
            for process in stack.processes():
                if process.pid not in seen:
                    seen.add(process.pid)
                    try:
                        if kind_of(process) == "renderer":
                            started.add(process.pid)
                    except psutil.Error:
                        continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield started
    finally:
        done.set()
        thread.join(5)


def per_page(
    stack: BrowserStack, count: int, run: Callable[[], None]
) -> tuple[float, dict[str, float]]:
    """Wall seconds and CPU seconds by kind, per page, of ``run()`` doing ``count`` pages."""
    before = cpu_by_kind(stack)
    started = time.monotonic()
    run()
    wall = (time.monotonic() - started) / count
    after = cpu_by_kind(stack)
    return wall, {kind: (after[kind] - before[kind]) / count for kind in after}


def show(label: str, wall: float, cpu: dict[str, float]) -> None:
    parts = ", ".join(f"{k} {v * 1000:.0f}" for k, v in sorted(cpu.items(), key=lambda i: -i[1]))
    print(f"{label}: {wall * 1000:.0f} ms wall, {sum(cpu.values()) * 1000:.0f} ms CPU ({parts})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--flag", action="append", default=[], help="a Chromium flag to add")
    parser.add_argument(
        "--real", action="store_true", help="PostgreSQL's HTML manual (postgresql-doc-15) pages"
    )
    args = parser.parse_args()
    stack_driver.CHROME_ARGS = (*stack_driver.CHROME_ARGS, *args.flag)

    with ExitStack() as resources:
        tmp = resources.enter_context(tempfile.TemporaryDirectory(prefix="sf-contexts-"))
        work = Path(tmp)
        if args.real:
            urls = resources.enter_context(DocSite()).pages(args.pages)
        else:
            urls = pages(resources.enter_context(LocalSite()), args.pages)
        settings = settings_for("postgresql://unused/none", work, SESSIONS_AT_A_RESTART, 0)
        with BrowserStack(settings, "contexts", SESSIONS_AT_A_RESTART, work / "stack") as stack:
            driver = stack.new_driver()
            tune_bidi(driver)
            for url in urls[:3]:  # warm: the first pages of a session cost more
                fetch_page(driver, FetchPageParams(url=url))

            def reused() -> None:
                for url in urls:
                    fetch_page(driver, FetchPageParams(url=url))

            def fresh() -> None:
                for url in urls:
                    context = open_context(driver)
                    fetch_page(driver, FetchPageParams(url=url))
                    close_context(driver, context)

            show("a page in a reused tab", *per_page(stack, args.pages, reused))
            close_context(driver, open_context(driver))  # warm the first context too
            with new_renderers(stack) as renderers:
                show("a fresh user context + its page", *per_page(stack, args.pages, fresh))
            print(f"renderers started per context: {len(renderers) / args.pages:.1f}")
            quit_driver(driver)

            pool = SessionPool(stack.new_driver, 1, prepare_ahead=True)
            with pool.lease("cleared") as first:  # warm: its first job opens the context
                fetch_page(first, FetchPageParams(url=urls[0]))

            def cleared() -> None:
                for url in urls:
                    with pool.lease("cleared") as leased:
                        fetch_page(leased, FetchPageParams(url=url))

            with counted_round_trips() as trips, new_renderers(stack) as renderers:
                show("a slot cleared in place + its page", *per_page(stack, args.pages, cleared))
            print(
                f"round trips per cleared job: {trips.total / args.pages:.1f}"
                f" ({trips.describe(args.pages)}); renderers started per job:"
                f" {len(renderers) / args.pages:.1f}"
            )
            pool.close()

            # Measured while the sessions live: a process that exited takes its CPU with it.
            before = cpu_by_kind(stack)
            started = time.monotonic()
            drivers = [stack.new_driver() for _ in range(SESSIONS_AT_A_RESTART)]
            for session in drivers:
                tune_bidi(session)
                open_context(session)
            wall = time.monotonic() - started
            after = cpu_by_kind(stack)
            for session in drivers:
                quit_driver(session)
            cpu = {kind: float(after[kind] - before[kind]) for kind in after}
            show(f"{SESSIONS_AT_A_RESTART} sessions, each with its first context", wall, cpu)
    print(f"flags added: {args.flag or 'none'}")


if __name__ == "__main__":
    main()
