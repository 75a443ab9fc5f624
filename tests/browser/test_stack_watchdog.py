"""A consumer killed with SIGKILL takes its browser stack with it (consumer.browser.stack.watchdog):
Xvfb, the Grid, chromedriver and every browser process, the browser still loading the page of
the attempt that is over."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from sqlalchemy.engine import Engine

from scrapefleet.consumer.browser.stack.processes import WORK_DIR_ENV, is_gone
from tests.browser.consumer_helpers import consumer_settings, fetch, queue_jobs
from tests.browser.site import LocalSite
from tests.integration.test_consumer import consumer_process
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

HOST = "b1"  # consumer_helpers' host: queue_jobs assigns to it


def stack_processes(state_dir: Path) -> list[psutil.Process]:
    """Live processes of any stack under ``state_dir``: by the work directory in their
    environment (Xvfb, the Grid) or their TMPDIR (chromedriver and every browser process)."""
    needle = str(state_dir.resolve())
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if any(env.get(key, "").startswith(needle) for key in (WORK_DIR_ENV, "TMPDIR")):
            found.append(proc)
    return found


def names(procs: list[psutil.Process]) -> set[str]:
    found = set()
    for proc in procs:
        try:
            found.add(proc.name())
        except psutil.Error:
            continue
    return found


def test_a_consumer_killed_with_sigkill_leaves_no_stack_process(
    engine: Engine, database_url: str, tmp_path: Path, site: LocalSite
) -> None:
    settings = consumer_settings(tmp_path, database_url, capacity=2)
    assert settings.state_dir is not None
    with consumer_process(settings, tmp_path, "--capacity", "2", host=HOST) as consumer:
        # A page that never finishes loading: the browser is busy with it when the kill comes.
        queue_jobs(engine, [fetch(site.url("/hang")) for _ in range(2)])

        def whole_stack() -> list[psutil.Process] | None:
            procs = stack_processes(settings.state_dir)
            wanted = {"Xvfb", "java", "chromedriver"}
            found = names(procs)
            return procs if wanted <= found and any("chrom" in n for n in found - wanted) else None

        procs = wait_for(whole_stack, 240, "the consumer's stack with a browser on the page")
        os.kill(consumer.pid, signal.SIGKILL)
        consumer.wait(30)
        wait_for(
            lambda: all(is_gone(p) for p in procs) and not stack_processes(settings.state_dir),
            60,
            "every process of the dead consumer's stack to end",
        )
