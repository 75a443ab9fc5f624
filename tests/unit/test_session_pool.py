"""The session pool's choices, on fake drivers: which lease waits, which starts a browser."""

from __future__ import annotations

import itertools
import threading
from contextlib import ExitStack
from typing import Any

import pytest

from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(30)


class FakeDriver:
    """Just enough of a BiDi session for the pool: user contexts with a tab each. Removing a
    context waits for ``removal_gate`` (a slot being prepared, for as long as a test likes)."""

    ids = itertools.count(1)

    def __init__(self, removal_gate: threading.Event) -> None:
        self.caps = {"webSocketUrl": "ws://fake"}
        self.session_id = f"session-{next(self.ids)}"
        self.window_handles = ["first-window"]
        self.browser = self
        self.browsing_context = self
        self.switch_to = self
        self.removal_gate = removal_gate

    def create_user_context(self) -> str:
        return f"context-{next(self.ids)}"

    def create(self, type: str, user_context: str) -> str:
        tab = f"tab-of-{user_context}"
        self.window_handles = [*self.window_handles, tab]
        return tab

    def window(self, handle: str) -> None:
        pass

    def remove_user_context(self, user_context: str) -> None:
        self.removal_gate.wait(10)
        self.window_handles = [h for h in self.window_handles if not h.endswith(user_context)]

    def execute_cdp_cmd(self, *_: Any) -> Any:
        raise RuntimeError("no CDP in a fake: the pool replaces the context instead")

    def quit(self) -> None:
        pass


@pytest.mark.parametrize("isolation", ["cleared", "context"])
def test_a_second_lease_starts_a_browser_rather_than_queue_behind_a_slot_being_prepared(
    isolation: str,
) -> None:
    gate = threading.Event()
    started: list[FakeDriver] = []

    def make_driver() -> FakeDriver:
        started.append(FakeDriver(gate))
        return started[-1]

    with SessionPool(make_driver, 2) as pool, ExitStack() as held:
        with pool.lease(isolation):  # type: ignore[arg-type]
            pass  # its slot is now being prepared for the next job, held up at the gate
        leased: list[Any] = []

        def lease() -> None:
            leased.append(held.enter_context(pool.lease(isolation)))  # type: ignore[arg-type]

        first = threading.Thread(target=lease)
        first.start()
        wait_for(lambda: pool._waiting_for_prepared == 1, 10, "the first lease waiting")
        second = threading.Thread(target=lease)
        second.start()
        # The first lease waits for the slot being prepared; the second starts a browser of
        # its own in the empty slot (~2.5 s) instead of waiting behind the first.
        wait_for(lambda: len(leased) == 1 and len(started) == 2, 10, "the second lease's browser")
        gate.set()
        first.join(10)
        second.join(10)
        assert len(leased) == 2
