"""A WebDriver session from a browser stack's Grid, and how it ends.

``open_session`` asks the stack's Grid for a Chromium session (with the Grid's credentials, the
host's window size, its sandbox unless the browser runs as root, a profile's user-data-dir and
proxy when a profile job asks); ``StackWebDriver.quit`` returns once that browser's processes
are gone, ended through the stack's ``StackControl`` (here, or by the browser agent) when they
outlive the quit.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium.common.exceptions import WebDriverException
from selenium.webdriver import ChromeOptions, Remote
from selenium.webdriver.chromium.remote_connection import ChromiumRemoteConnection
from selenium.webdriver.common.proxy import Proxy, ProxyType
from selenium.webdriver.remote.client_config import ClientConfig

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.actions.job_setup import proxy_server_arg
from scrapefleet.consumer.browser.actions.renderer_deaths import RendererWatch
from scrapefleet.consumer.browser.sessions.session_pool import BrowserLaunch, quit_driver
from scrapefleet.consumer.browser.stack.grid_auth import GridCredentials
from scrapefleet.consumer.browser.stack.process_control import StackControl
from scrapefleet.consumer.browser.stack.processes import await_exit, processes_naming
from scrapefleet.consumer.browser.stack.run_as import needs_no_sandbox

CHROME_ARGS = (
    "--disable-dev-shm-usage",  # /dev/shm is small in containers; Chromium crashes on it
    "--disable-gpu",
    "--disable-background-networking",  # no calls home: hosts may be offline
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    # Every window (so every job's user context) would preload the omnibox's WebUI popups in a
    # renderer of their own, and every navigation would start a spare renderer for the next:
    # measured here, 0.54 -> 0.30 s of CPU per fresh context (tests.benchmarks.bench_browser).
    # chromedriver merges this list with its own --disable-features.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxFullPopup,WebUIOmniboxAimPopup,"
    "SpareRendererForSitePerProcess",
)
# Chromium lingers up to ~1.5 s after its session is deleted (measured here); one that takes
# longer than this is killed, so that a quit always ends with the browser gone.
BROWSER_EXIT_TIMEOUT_S = 5.0


class StackWebDriver(Remote):
    """A Remote session that can also send Chrome DevTools commands through the Grid.
    ``launched_proxy``: the proxy the whole browser was started with (a profile's), if any."""

    launched_proxy: str | None = None
    job_context: Any = None  # the session pool's JobContext for the job it is leased to
    stack_control: StackControl | None = None  # ends a browser that outlives its quit
    renderer_watch: RendererWatch | None = (
        None  # why its renderers die (consumer.browser.actions.renderer_deaths)
    )

    def execute_cdp_cmd(self, cmd: str, cmd_args: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.execute(
            "executeCdpCommand", {"cmd": cmd, "params": cmd_args}
        )["value"]
        return result

    def quit(self) -> None:
        """End the session and return once its browser's processes are gone (killed after
        BROWSER_EXIT_TIMEOUT_S). The session pool frees the session's permit when this returns:
        the next session's Chromium never starts beside one still exiting, so a host runs no
        more browsers than its capacity, even for an instant."""
        profile_dir = session_profile_dir(self)
        browser = processes_naming(profile_dir) if profile_dir is not None else []
        if self.renderer_watch is not None:
            self.renderer_watch.close()
        try:
            super().quit()
        finally:
            if self.stack_control is not None:
                self.stack_control.await_browser_exit(browser, BROWSER_EXIT_TIMEOUT_S)
            else:
                await_exit(browser, BROWSER_EXIT_TIMEOUT_S)


def session_profile_dir(driver: Any) -> Path | None:
    """The user-data-dir chromedriver reported for the session's browser, if any."""
    with contextlib.suppress(Exception):
        profile = (getattr(driver, "capabilities", None) or {}).get("chrome", {})
        user_data_dir = profile.get("userDataDir")
        if user_data_dir:
            return Path(user_data_dir)
    return None


@dataclass(frozen=True)
class GridSession:
    """Where a session comes from: the host's stack's Grid, its credentials and its control."""

    host: str
    url: str
    auth: GridCredentials | None
    control: StackControl


def session_wait_s(settings: Any) -> float:
    """How long the client waits for the Grid: it must outlast a page load, or the client gives
    up first."""
    return float(max(settings.session_create_timeout_s, settings.page_load_timeout_s + 30))


def chrome_options(
    settings: Any, browser_uid: int, launch: BrowserLaunch | None = None
) -> ChromeOptions:
    options = ChromeOptions()
    if launch is not None:  # a persistent profile's; else chromedriver makes a directory
        options.add_argument(f"--user-data-dir={launch.user_data_dir}")
        if launch.proxy:
            options.add_argument(f"--proxy-server={proxy_server_arg(launch.proxy)}")
    options.binary_location = str(settings.chromium_binary)
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    if needs_no_sandbox(settings.chromium_sandbox, browser_uid):
        options.add_argument("--no-sandbox")
    if settings.browser_headless:  # a lighter stack, as an option: nothing drawn on Xvfb
        options.add_argument("--headless=new")
    width, height = settings.screen_width_px, settings.screen_height_px
    options.add_argument(f"--window-size={width},{height}")
    # BiDi: a fresh user context per job in a warm session (consumer.browser.sessions.session_pool).
    options.enable_bidi = True
    return options


def open_session(
    settings: Any, grid: GridSession, launch: BrowserLaunch | None = None
) -> StackWebDriver:
    """A fresh session from ``grid`` (started as ``launch`` says, a persistent profile's
    browser, when given); any failure to get one is a StackError."""
    http_timeout = session_wait_s(settings)
    config = ClientConfig(
        remote_server_addr=grid.url,
        timeout=int(http_timeout),
        proxy=Proxy({"proxyType": ProxyType.DIRECT}),
        username=grid.auth.username if grid.auth else None,
        password=grid.auth.password if grid.auth else None,
    )
    connection = ChromiumRemoteConnection(
        grid.url, vendor_prefix="goog", browser_name="chrome", client_config=config
    )
    options = chrome_options(settings, grid.control.browser_uid, launch)
    try:
        driver = StackWebDriver(command_executor=connection, options=options)
        driver.launched_proxy = launch.proxy if launch else None
        driver.stack_control = grid.control
        driver.renderer_watch = RendererWatch.start(driver.capabilities)
    except (WebDriverException, OSError) as exc:
        raise StackError(f"no browser session from the Grid of {grid.host}: {exc}") from exc
    except Exception as exc:  # urllib3 errors when the Grid is gone
        raise StackError(f"Grid of {grid.host} unreachable: {exc!r}") from exc
    try:
        driver.set_page_load_timeout(settings.page_load_timeout_s)
        driver.set_script_timeout(settings.script_timeout_s)
    except Exception as exc:
        quit_driver(driver)  # never raises: the session is gone, or stop() ends its processes
        raise StackError(f"new session of {grid.host} does not answer: {exc}") from exc
    return driver
