"""Whose fault a renderer's death was, from what the browser said of it (pure parts)."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

from selenium.common.exceptions import WebDriverException

from scrapefleet.consumer.browser.actions.renderer_deaths import (
    Death,
    RendererWatch,
    debugger_address,
    is_renderer_crash,
    killed_from_outside,
    killed_line,
    oom_kill_count,
)
from scrapefleet.consumer.browser.actions.selenium_actions import RendererCrashed
from tests.waiting import wait_for


def _death(status: str, code: int, oom_kills: int | None = 0) -> Death:
    return Death(at=1.0, target_id="T", status=status, code=code, oom_kills=oom_kills)


def test_a_renderer_killed_by_a_signal_is_the_hosts_fault() -> None:
    why = killed_from_outside([_death("killed", 9)], oom_kills_before=0)
    assert why is not None and "SIGKILL from outside" in why
    assert "SIGTERM" in (killed_from_outside([_death("killed", 15)], 0) or "")


def test_the_oom_killer_is_named_when_the_kernel_counted_a_kill() -> None:
    assert "OOM killer" in (killed_from_outside([_death("killed", 9, oom_kills=3)], 2) or "")
    # The count unknown: still a kill from outside, without the claim of an OOM.
    assert "OOM" not in (killed_from_outside([_death("killed", 9, oom_kills=None)], 2) or "")


def test_a_crash_is_the_pages_fault_even_beside_a_kill() -> None:
    assert killed_from_outside([_death("crashed", 11)], 0) is None  # chrome://crash
    assert killed_from_outside([_death("crashed", 5)], 0) is None  # V8 out of memory
    assert killed_from_outside([_death("abnormal", 1)], 0) is None
    assert killed_from_outside([_death("killed", 9), _death("crashed", 11)], 0) is None


def test_no_word_from_the_browser_leaves_the_page_at_fault() -> None:
    assert killed_from_outside([], 0) is None


def test_the_debugger_address_is_taken_on_loopback_only() -> None:
    caps = {"goog:chromeOptions": {"debuggerAddress": "localhost:35531"}}
    assert debugger_address(caps) == ("127.0.0.1", 35531)
    assert debugger_address({"goog:chromeOptions": {"debuggerAddress": "10.0.0.9:80"}}) is None
    assert debugger_address({"goog:chromeOptions": {"debuggerAddress": "localhost:x"}}) is None
    assert debugger_address({"goog:chromeOptions": {"debuggerAddress": "localhost:0"}}) is None
    assert debugger_address({}) is None


def test_the_kernels_oom_kill_count(tmp_path: Path) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 12\noom_kill 7\n")
    assert oom_kill_count(vmstat) == 7
    vmstat.write_text("nr_free_pages 12\n")
    assert oom_kill_count(vmstat) is None
    assert oom_kill_count(tmp_path / "missing") is None


def test_a_renderer_killed_from_outside_is_not_said_to_be_the_pages_crash() -> None:
    """The release line once read "the page crashed the renderer: ... killed from outside the
    page (the host's fault)": two causes at once. It says where, then the one cause."""
    killed = killed_from_outside([_death("killed", 9)], oom_kills_before=0)
    assert killed is not None
    crashed = RendererCrashed(
        "loading http://a/x: the page crashed the renderer", "loading http://a/x"
    )
    line = killed_line(crashed, killed)
    assert line == f"loading http://a/x: {killed}"
    assert "crashed" not in line
    raw = WebDriverException("tab crashed\n  (Session info: chrome=156)")
    assert "crashed" not in killed_line(raw, killed) and killed in killed_line(raw, killed)


def test_what_counts_as_a_renderer_crash() -> None:
    assert is_renderer_crash(RendererCrashed("loading x: the page crashed the renderer"))
    assert is_renderer_crash(WebDriverException("tab crashed\n  (Session info: chrome=156)"))
    assert not is_renderer_crash(WebDriverException("no such element"))
    assert not is_renderer_crash(ValueError("tab crashed"))


class _FakeSocket:
    """The browser's DevTools websocket: the messages it sends, when the test says so."""

    def __init__(self) -> None:
        self.messages: queue.Queue[str | None] = queue.Queue()

    def recv(self) -> str:
        message = self.messages.get()
        if message is None:
            raise ConnectionError("the browser went away")
        return message

    def crash(self, target: str, status: str, code: int) -> None:
        params = {"targetId": target, "status": status, "errorCode": code}
        self.messages.put(json.dumps({"method": "Target.targetCrashed", "params": params}))

    def abort(self) -> None:
        self.messages.put(None)

    def close(self, timeout: float = 0) -> None:
        pass


def test_a_late_event_is_waited_for_and_the_jobs_tab_is_known_by_its_id() -> None:
    ws = _FakeSocket()
    watch = RendererWatch(ws)
    try:
        ws.messages.put(json.dumps({"method": "Target.targetInfoChanged", "params": {}}))
        ws.crash("EARLIER", "killed", 9)  # heard before the attempt's page began
        wait_for(lambda: watch.deaths_since(0.0, wait_s=0), 5, "the first death heard")
        began = time.monotonic()
        assert watch.deaths_since(began, wait_s=0) == []
        (death,) = watch.deaths_since(began, tab="EARLIER", wait_s=0)  # the job's own tab
        assert (death.status, death.code) == ("killed", 9)
        threading.Timer(0.3, ws.crash, args=("LATE", "crashed", 11)).start()
        (late,) = watch.deaths_since(began, wait_s=5)  # comes after the action's error
        assert (late.target_id, late.status) == ("LATE", "crashed")
    finally:
        watch.close()
    assert watch.deaths_since(time.monotonic(), wait_s=5) == []  # closed: no wait
