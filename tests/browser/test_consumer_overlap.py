"""Overlapped restarts on a real consumer: the next stack (its own Xvfb, Grid, HOME and TMPDIR)
starts while the old one serves, claims switch to it at the budget, and the old one is stopped
after its last job with none of its processes left. Sessions across both stacks never exceed the
host's capacity."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import psutil
import pytest
from sqlalchemy.engine import Engine

from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.browser.stack.processes import is_gone
from scrapefleet.consumer.daemon import Consumer
from tests.browser.conftest import grid_session_ids
from tests.browser.consumer_helpers import (
    consumer_settings,
    consumer_thread,
    fetch,
    finished_unreleased,
    host_events,
    queue_jobs,
    rows,
)
from tests.browser.site import LocalSite
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]

CAPACITY = 3
CHROMIUM = "/usr/lib/chromium/chromium"  # what Debian's /usr/bin/chromium wrapper runs


def _is_browser(process: psutil.Process) -> bool:
    """A session's Chromium: its browser process (the others carry --type=...)."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:  # gone meanwhile
        return False
    return (
        bool(cmdline)
        and Path(cmdline[0]).name == Path(CHROMIUM).name
        and not any(arg.startswith("--type=") for arg in cmdline)
    )


def browser_sessions_in(tmp_dirs: list[Path]) -> int:
    """The browser sessions whose profile lies in one of ``tmp_dirs``: their browser processes
    counted by profile directory, in one pass over the processes.

    From the processes rather than the Grids' /status, which may list a session a moment after
    it was deleted; in one pass rather than stack by stack, which under load takes long enough
    to see a browser of one stack and then its successor in the other; by profile rather than
    by process, because a starting Chromium forks its helpers and each child carries the
    browser's own command line until it execs its own (up to three such processes for one
    browser, longer under load)."""
    needles = [f"--user-data-dir={folder}{os.sep}" for folder in tmp_dirs]
    profiles: set[str] = set()
    for process in psutil.process_iter():
        if _is_browser(process):
            with contextlib.suppress(psutil.Error):
                profiles.update(
                    arg for arg in process.cmdline() if any(arg.startswith(n) for n in needles)
                )
    return len(profiles)


class StackWatch:
    """From a thread, every 50 ms: the Chromium browsers of all the host's stacks together (the
    most seen at once), and every process of the first stack (to check none outlives it)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.most_sessions = 0
        self.stacks_seen: set[Path] = set()
        self.first: BrowserStack | None = None
        self.first_processes: dict[int, psutil.Process] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(0.05):
            supervisor = self.consumer.supervisor
            if supervisor is None or not supervisor.running:
                continue
            stacks = supervisor.stacks()
            sessions = browser_sessions_in([stack.tmp_dir for stack in stacks])
            self.most_sessions = max(self.most_sessions, sessions)
            for stack in stacks:
                try:
                    grid_session_ids(stack)  # answers: the stack is up
                    self.stacks_seen.add(stack.work_dir)
                except Exception:  # a Grid starting or stopping
                    pass
            if self.first is None:
                self.first = supervisor.stack
            for proc in self.first.processes():
                self.first_processes.setdefault(proc.pid, proc)

    def __enter__(self) -> StackWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)


def test_an_overlapped_restart_stays_within_capacity_and_leaves_nothing_of_the_old_stack(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    every = 6
    settings = consumer_settings(
        tmp_path, database_url, capacity=CAPACITY, restart_every=every, reboot_every=0
    )
    with consumer_thread(settings, database_url) as consumer, StackWatch(consumer) as watch:
        # Slow pages: jobs are still in flight on the old stack at the switch.
        ids = queue_jobs(engine, [fetch(site.url("/slow")) for _ in range(2 * every + 2)])
        wait_for(lambda: len(host_events(engine, "stack_retired")) >= 2, 300, "two stacks retired")
        wait_for(lambda: finished_unreleased(engine, ids), 240, "every job to finish")
        first = watch.first

    # Sessions across both stacks, counted by their browsers' profiles: a session's permit is
    # freed only once its browser has exited, so none starts beside one still exiting.
    assert 2 <= watch.most_sessions <= CAPACITY, f"{watch.most_sessions} sessions at once"
    # A next stack takes a directory no running or retiring stack holds: b, then a or c
    # (a again when the first stack was already stopped).
    assert len(watch.stacks_seen) >= 2
    assert {p.name for p in watch.stacks_seen} <= {"a", "b", "c"}
    assert first is not None and watch.first_processes, "no process of the first stack seen"
    survivors = [p for p in watch.first_processes.values() if not is_gone(p)]
    assert survivors == [], f"processes of the first stack outlived it: {survivors}"

    statuses = rows(engine, "SELECT status, attempts FROM jobs WHERE id = ANY(:ids)", ids=ids)
    assert {(r.status, r.attempts) for r in statuses} == {("completed", 1)}
    restarts = host_events(engine, "restart")
    assert len(restarts) == 2 and all(r.details["overlapped"] for r in restarts)
    assert all(r.details["no_claim_s"] < 60 for r in restarts)
    retired = host_events(engine, "stack_retired")
    assert all(r.details["killed"] > 0 and r.details["leftover_pids"] == [] for r in retired)
    # The host never said it was restarting: it claimed throughout.
    assert [e for e in host_events(engine, "state") if e.to_state == "restarting"] == []
