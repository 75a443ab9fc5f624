"""Counting a browser job's round trips through the Grid: every classic WebDriver command
(Selenium's ``RemoteConnection.execute``) and every BiDi command on a session's websocket
(``WebSocketConnection._round_trip``, which both Selenium's typed modules and our raw
``consumer.browser.sessions.bidi.command`` go through), by name, while the block runs. Events the
browser sends unasked are not round trips and are not counted."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from selenium.webdriver.remote.remote_connection import RemoteConnection
from selenium.webdriver.remote.websocket_connection import WebSocketConnection


class RoundTrips:
    def __init__(self) -> None:
        self.by_name: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, name: str) -> None:
        with self._lock:
            self.by_name[name] += 1

    @property
    def total(self) -> int:
        return sum(self.by_name.values())

    def describe(self, per: int) -> str:
        """Each command's count divided by ``per`` (jobs), most frequent first."""
        return ", ".join(f"{name} {count / per:.1f}" for name, count in self.by_name.most_common())


@contextmanager
def counted_round_trips() -> Iterator[RoundTrips]:
    trips = RoundTrips()
    classic, bidi = RemoteConnection.execute, WebSocketConnection._round_trip

    def counted_classic(self: Any, command: str, params: dict[str, Any]) -> Any:
        name = command
        if command == "executeCdpCommand":  # one name for every CDP method: tell them apart
            name = f"cdp {params.get('cmd')}"
        trips.add(name)
        return classic(self, command, params)

    def counted_bidi(self: Any, payload: dict[str, Any]) -> Any:
        trips.add(f"bidi {payload.get('method')}")
        return bidi(self, payload)

    RemoteConnection.execute = counted_classic  # type: ignore[method-assign]
    WebSocketConnection._round_trip = counted_bidi  # type: ignore[method-assign]
    try:
        yield trips
    finally:
        RemoteConnection.execute = classic  # type: ignore[method-assign]
        WebSocketConnection._round_trip = bidi  # type: ignore[method-assign]
