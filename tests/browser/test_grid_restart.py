"""A Grid that dies while its stack starts is started again in place, on the real stack."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_a_grid_killed_while_it_starts_is_started_again_in_place(
    settings: Settings, own_stack_dir: Path
) -> None:
    stack = BrowserStack(settings, "grid-kill", 1, own_stack_dir)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stack.start()
        except BaseException as exc:
            errors.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    try:
        first = wait_for(lambda: stack.grid_pid, scaled(30), "the Grid's JVM")
        xvfb = stack.xvfb_pid
        os.kill(first, signal.SIGKILL)  # the JVM takes seconds to be ready: this is mid-start
        starting.join(scaled(90))
        assert not starting.is_alive(), "the start never returned"
        assert not errors, f"the stack failed instead of starting its Grid again: {errors}"
        assert stack.grid_restarts >= 1
        assert stack.grid_pid not in (None, first)
        assert xvfb is not None and stack.xvfb_pid == xvfb, "Xvfb was not kept"
        assert stack.healthy()
    finally:
        starting.join(scaled(90))
        stack.stop()
