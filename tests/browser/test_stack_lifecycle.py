"""Start, stop, restart and recovery of a stack of its own (not the shared one)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.actions.selenium_actions import FetchPageParams, fetch_page
from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from scrapefleet.consumer.browser.stack import grid_jvm
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.browser.stack.host_needs import find_grid_jar
from scrapefleet.consumer.browser.stack.processes import is_gone
from tests.browser.site import LocalSite
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]


def processes_mentioning(*folders: Path) -> list[psutil.Process]:
    """Every live process whose command line or environment names one of the folders."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            text = " ".join(proc.cmdline()) + " ".join(proc.environ().values())
        except psutil.Error:
            continue
        if any(str(folder) in text for folder in folders):
            found.append(proc)
    return found


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def free_display() -> int:
    for display in range(150, 400):
        taken = Path(f"/tmp/.X{display}-lock"), Path(f"/tmp/.X11-unix/X{display}")
        if not any(path.exists() for path in taken):
            return display
    raise AssertionError("no free display to test with")


def test_stop_ends_every_process_including_orphans(
    settings: Settings, site: LocalSite, own_stack_dir: Path
) -> None:
    display = free_display()
    lock = Path(f"/tmp/.X{display}-lock")
    lock.write_text(f"{dead_pid():>10}\n")  # a stale lock, as a crashed Xvfb leaves it
    stack = BrowserStack(settings, "lifecycle", 2, own_stack_dir, display=display)
    try:
        stack.start()
        assert stack.display == display and stack.healthy()
        driver = stack.new_driver()  # left open on purpose: stop must end it anyway
        fetch_page(driver, FetchPageParams(url=site.url("/item")))
        names = {p.name() for p in stack.processes()}
        assert {"Xvfb", "java", "chromedriver", "chrome_crashpad_handler"} <= names
        tracked = stack.processes()
        port = stack.grid_port
        assert port is not None
    finally:
        report = stack.stop()
    assert report.leftover_pids == ()
    assert report.killed >= len(tracked)
    assert [p.pid for p in tracked if not is_gone(p)] == []
    assert processes_mentioning(own_stack_dir, stack.tmp_dir) == []
    assert not lock.exists() and not Path(f"/tmp/.X11-unix/X{display}").exists()
    assert not port_open(port)
    assert not stack.tmp_dir.exists() or not any(stack.tmp_dir.iterdir())
    assert not stack.healthy()


def test_restart_report_and_recovery_from_a_killed_grid(
    settings: Settings, site: LocalSite, own_stack_dir: Path
) -> None:
    with BrowserStack(settings, "recovery", 2, own_stack_dir) as stack:
        driver = stack.new_driver()
        fetch_page(driver, FetchPageParams(url=site.url("/item")))
        # The session stays open: restart must take its browser with it.
        report = stack.restart()
        assert 0 < report.duration_s < 30
        assert report.killed >= 5  # Grid, Xvfb, chromedriver, browser processes
        assert report.pss_before_bytes > report.pss_after_bytes > 0
        assert stack.healthy()

        driver = stack.new_driver()
        driver.get(site.url("/plain"))
        grid_pid = stack.grid_pid
        assert grid_pid is not None
        os.kill(grid_pid, signal.SIGKILL)  # the Grid dies mid-job
        deadline = time.monotonic() + 10
        while stack.healthy() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not stack.healthy()
        with pytest.raises(StackError):
            stack.new_driver()

        recovered = stack.restart()
        assert recovered.killed >= 2  # the orphaned chromedriver and browser, Xvfb
        assert stack.healthy()
        fresh = stack.new_driver()
        try:
            assert fetch_page(fresh, FetchPageParams(url=site.url("/plain")))["title"] == "Plain"
        finally:
            fresh.quit()
    assert processes_mentioning(own_stack_dir, stack.tmp_dir) == []


def test_a_grid_whose_every_slot_holds_a_session_is_healthy(
    settings: Settings, site: LocalSite, own_stack_dir: Path
) -> None:
    """The Grid's status says ``ready: false`` when it has no slot left: a host holding all its
    sessions is busy, and one lost session must not make it look down (a whole-stack restart)."""
    with BrowserStack(settings, "full", 1, own_stack_dir) as stack:
        driver = stack.new_driver()
        try:
            fetch_page(driver, FetchPageParams(url=site.url("/plain")))
            assert stack.healthy()
        finally:
            driver.quit()
        assert stack.healthy()


def test_the_lighter_stack_chromedriver_without_a_grid_headless_runs_and_restarts(
    settings: Settings, site: LocalSite, own_stack_dir: Path
) -> None:
    """``browser_driver = "chromedriver"``: no JVM, one chromedriver serves the sessions (BiDi
    user contexts included); ``browser_headless``: Chromium headless. A restart starts a new
    chromedriver, and the stop leaves nothing."""
    light = settings.model_copy(update={"browser_driver": "chromedriver", "browser_headless": True})
    with BrowserStack(light, "light", 2, own_stack_dir) as stack:
        pool = SessionPool(stack.new_driver, 2)
        try:
            for isolation in ("cleared", "context", "shared"):
                with pool.lease(isolation) as driver:
                    page = fetch_page(driver, FetchPageParams(url=site.url("/item")))
                    assert page["title"] == "Widget 42"
            procs = stack.processes()
            names = {p.name() for p in procs}
            assert "java" not in names and {"chromedriver", "Xvfb"} <= names, names
            browsers = [" ".join(p.cmdline()) for p in procs if p.name().startswith("chrom")]
            assert any("--headless=new" in line for line in browsers)
            assert stack.healthy()
            first = stack.grid_pid
            stack.restart()
            assert stack.grid_pid != first and stack.healthy()
            with pool.lease() as driver:
                assert fetch_page(driver, FetchPageParams(url=site.url("/plain")))["status"] == 200
        finally:
            pool.close()
    assert processes_mentioning(own_stack_dir, stack.tmp_dir) == []


def test_a_session_pool_outlives_a_restart_of_its_stack(
    settings: Settings, site: LocalSite, own_stack_dir: Path
) -> None:
    with BrowserStack(settings, "pooled", 2, own_stack_dir) as stack:
        pool = SessionPool(stack.new_driver, 2)
        try:
            with pool.lease() as driver:
                before = driver.session_id
                fetch_page(driver, FetchPageParams(url=site.url("/plain")))
            wait_for(lambda: pool.prepared == 1, 30, "a warm slot")
            stack.restart()  # the Grid and every browser of the pool's sessions end
            with pool.lease() as driver:  # the dead session is replaced, the job runs
                assert driver.session_id != before
                assert fetch_page(driver, FetchPageParams(url=site.url("/item")))["status"] == 200
            assert pool.replaced == 1
        finally:
            pool.close()
    assert processes_mentioning(own_stack_dir, stack.tmp_dir) == []


def test_a_stack_starts_in_a_directory_whose_path_has_spaces(
    settings: Settings, site: LocalSite, tmp_path: Path
) -> None:
    work = tmp_path / "state dir (host a)" / "stack"
    with BrowserStack(settings, "spaced", 1, work) as stack:
        driver = stack.new_driver()
        try:
            page = fetch_page(driver, FetchPageParams(url=site.url("/item")))
            assert page["title"] == "Widget 42"
        finally:
            driver.quit()
    assert processes_mentioning(work, stack.tmp_dir) == []


def _grid_command(stack: BrowserStack) -> str:
    assert stack.grid_pid is not None
    return " ".join(psutil.Process(stack.grid_pid).cmdline())


def test_the_first_grid_dumps_its_classes_and_the_next_maps_them(
    settings: Settings, own_stack_dir: Path
) -> None:
    archive = grid_jvm.archive_path(own_stack_dir, find_grid_jar(settings.grid_jar))
    archive.unlink(missing_ok=True)
    # The JVM writes its archive as it exits after SIGTERM: on a loaded machine that outlasts
    # the tests' short stop timeout, and a SIGKILL leaves no archive.
    settings = settings.model_copy(update={"stack_stop_timeout_s": scaled(30.0)})
    with BrowserStack(settings, "archive", 1, own_stack_dir) as stack:
        assert "-XX:ArchiveClassesAtExit=" in _grid_command(stack)
        assert "-XX:TieredStopAtLevel=1" in _grid_command(stack)
    assert archive.is_file()  # dumped at the Grid's exit, mapped once, then kept
    with BrowserStack(settings, "archive", 1, own_stack_dir) as stack:
        assert f"-XX:SharedArchiveFile={archive}" in _grid_command(stack)
        assert stack.healthy()


def test_a_truncated_class_archive_is_never_adopted(settings: Settings, tmp_path: Path) -> None:
    """A JVM that maps a truncated archive dies of SIGBUS: one is refused, not kept."""
    dumped = tmp_path / "dumped.jsa"
    jar = find_grid_jar(settings.grid_jar)
    subprocess.run(
        [str(settings.java_binary), *grid_jvm.JVM_FLAGS, f"-XX:ArchiveClassesAtExit={dumped}",
         "-jar", str(jar), "--version"],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert dumped.stat().st_size > 100_000
    pending = tmp_path / "pending.jsa"
    pending.write_bytes(dumped.read_bytes()[:100_000])
    kept = tmp_path / "kept.jsa"
    assert not grid_jvm.adopt_archive(settings.java_binary, pending, kept)
    assert not kept.exists()
    assert list(tmp_path.glob("hs_err_pid*.log")), "the refused JVM's crash file lies beside it"
    assert not list(Path.cwd().glob("hs_err_pid*.log"))
    assert grid_jvm.adopt_archive(settings.java_binary, dumped, kept) and kept.is_file()
