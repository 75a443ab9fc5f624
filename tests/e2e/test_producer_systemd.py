"""A producer under a ``Type=notify`` unit with ``WatchdogSec=``: a real producer process tells
the notify socket it is ready, pings the watchdog every cycle and says when it stops."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.local.local_fleet import LocalFleet
from scrapefleet.common.runtime.sd_notify import Notifier
from tests.waiting import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

FAST = {"SCRAPEFLEET_PRODUCER_INTERVAL_S": "0.2"}


def _received(sock: socket.socket, until: float) -> list[str]:
    messages = []
    while time.monotonic() < until:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
        if messages.count("WATCHDOG=1") >= 3:
            break
    return messages


def test_ready_then_a_watchdog_ping_per_cycle_then_stopping(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    address = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(address))
        sock.settimeout(0.2)
        fleet = LocalFleet(
            database_url, tmp_path / "state", [], env={**FAST, "NOTIFY_SOCKET": str(address)}
        )
        try:
            fleet.start_producer()
            messages = _received(sock, time.monotonic() + scaled(20))
        finally:
            fleet.stop()
        after_stop = _received(sock, time.monotonic() + 1.0)
    assert messages[0] == "READY=1" and messages.count("READY=1") == 1, messages
    assert messages.count("WATCHDOG=1") >= 3, messages
    assert "STOPPING=1" in after_stop, after_stop


def test_without_a_notify_socket_nothing_is_sent_and_a_dead_one_is_not_fatal(
    tmp_path: Path,
) -> None:
    assert not Notifier(address="").enabled
    Notifier(address="").ready()  # a terminal, a test: nothing to do
    gone = Notifier(address=str(tmp_path / "no-such.sock"))
    gone.watchdog()  # warns once, never raises
    gone.stopping()
