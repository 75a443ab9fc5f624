"""Settings of the browser: a host's defaults for browser jobs (User-Agent, proxy, locale, time
zone, blocked resources), persistent profiles, and the browser stack itself (binaries, Xvfb's
screen, timeouts, retries of a stack that failed to start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from scrapefleet.common.browser.options import (
    validate_browser_proxy,
    validate_locale,
    validate_timezone,
)
from scrapefleet.common.constants import ARTIFACT_HTML_MAX_BYTES
from scrapefleet.common.http.params import validate_user_agent


class BrowserSettings(BaseModel):
    # Browser jobs (common/browser/options.py): the host's defaults; a job's ``browser`` wins.
    browser_user_agent: str | None = Field(
        default=None,
        description=(
            "browser jobs' User-Agent unless the job's `browser.user_agent` sets "
            "one; unset -> Chromium's own"
        ),
    )
    browser_proxy: SecretStr | None = Field(
        default=None,
        description=(
            "`http://`, `https://` (`user:password@` allowed) or `socks5://` URL "
            "browser jobs go through unless the job's `browser.proxy` names one; "
            "unset -> direct"
        ),
    )
    browser_locale: str | None = Field(
        default=None,
        description=(
            "browser jobs' locale (`navigator.language`, `Intl`, `Accept-"
            "Language`), e.g. `de-DE`; unset -> `en-US`"
        ),
    )
    browser_timezone: str | None = Field(
        default=None,
        description="browser jobs' IANA time zone, e.g. `Europe/Berlin`; unset -> the host's",
    )
    browser_block: Annotated[list[Literal["images", "fonts", "media"]], NoDecode] = Field(
        default_factory=list,
        description=(
            "resource types browser jobs do not load: `images`, `fonts`, `media` "
            "(comma-separated in the environment); a job's `browser.block` replaces"
            " it"
        ),
    )
    # Profiles (common/browser/profile_names.py): persistent user-data-dirs, one per profile, on its
    # host.
    profiles_dir: Path | None = Field(
        default=None,
        description=(
            "on a consumer host: one Chromium user-data-dir per profile bound to "
            "it, `<profiles_dir>/<name>` (docs/how-to/profiles.md)"
        ),
    )
    # a blocked profile rests this long before its next job
    profile_block_cooldown_s: float = Field(
        default=1800.0,
        ge=0,
        le=30 * 86400,
        description=(
            "a profile whose job was blocked gets no job for this long (0-30 days), doubled"
            " with each further block in a row, up to profile_block_max_cooldown_s"
        ),
    )
    profile_block_max_cooldown_s: float = Field(
        default=86400.0,
        ge=0,
        le=30 * 86400,
        description=(
            "the longest a profile's growing cool-down gets (0-30 days; a success starts it"
            " over at profile_block_cooldown_s)"
        ),
    )

    # Browser stack: consumer/browser/stack/browser_stack.py, selenium_actions.py, artifacts.py.
    # Defaults are Debian's paths; the jar is searched in <repo>/.ci/node and /opt/scrapefleet.
    grid_jar: Path | None = Field(
        default=None, description="Selenium Server 4 jar; unset -> search the usual places"
    )
    java_binary: Path = Field(
        default=Path("/usr/bin/java"), description="the Java that runs the Selenium Grid"
    )
    xvfb_binary: Path = Field(
        default=Path("/usr/bin/Xvfb"), description="the X server the browsers draw on"
    )
    chromium_binary: Path = Field(
        default=Path("/usr/bin/chromium"), description="Debian's Chromium"
    )
    chromedriver_binary: Path = Field(
        default=Path("/usr/bin/chromedriver"),
        description="the chromedriver of that Chromium's version",
    )
    # Lighter stacks, as options; the design card's stack (Grid + Xvfb, headed) is the default.
    browser_driver: Literal["grid", "chromedriver"] = Field(
        default="grid",
        description="what drives the browsers: `grid` (Selenium Grid standalone, the card's"
        " stack) or `chromedriver` (one chromedriver server the host runs itself, no Grid and"
        " no Java, as `scrapefleet try` does; it has no credentials of its own: any local"
        " user who finds its loopback port can drive the browsers); restarts restart it as"
        " they would the Grid",
    )
    browser_headless: bool = Field(
        default=False,
        description="run Chromium headless (`--headless=new`) instead of drawing on Xvfb's"
        " screen; screenshots are the window's size either way",
    )
    browser_user: str | None = Field(
        default=None,
        min_length=1,
        description="run Xvfb, the Grid and Chromium as this user (needs root or CAP_SETUID);"
        " unset -> the consumer's own",
    )
    browser_agent_socket: Path | None = Field(
        default=None,
        description="with browser_user: the browser agent's socket, which starts and ends the"
        " stack as that user (consumer.browser.agent.browser_agent), so the consumer needs no"
        " capability; unset -> the consumer switches users itself (needs root or CAP_SETUID)",
    )
    chromium_sandbox: bool | None = Field(
        default=None,
        description="unset -> on unless the browser runs as root; false -> --no-sandbox",
    )
    page_load_timeout_s: float = Field(default=30.0, gt=0, description="Selenium page load")
    script_timeout_s: float = Field(default=30.0, gt=0, description="Selenium scripts")
    stack_start_timeout_s: float = Field(default=60.0, gt=0, description="Grid /status ready")
    stack_stop_timeout_s: float = Field(default=10.0, gt=0, description="SIGTERM, then SIGKILL")
    session_create_timeout_s: float = Field(default=60.0, gt=0, description="new WebDriver")
    grid_session_timeout_s: int = Field(
        default=120, ge=10, description="Grid reaps a session idle this long"
    )
    screen_width_px: int = Field(
        default=1366, ge=320, le=7680, description="Xvfb screen and browser window width"
    )
    screen_height_px: int = Field(
        default=768, ge=240, le=4320, description="Xvfb screen and browser window height"
    )
    artifact_retention_days: float = Field(
        default=14.0, gt=0, description="failure artifacts older than this are deleted"
    )
    artifact_html_max_bytes: int = Field(
        default=ARTIFACT_HTML_MAX_BYTES,
        ge=10_000,
        description="a failed attempt's saved page HTML is cut here (a note in its artifacts"
        " says so): a page's script can grow its DOM without end",
    )
    browser: bool = Field(
        default=True,
        description="own a browser stack, started on the first browser job; false -> the"
        " host reports its browser absent and is given no browser job",
    )
    reboot_command: str | None = Field(
        default=None,
        min_length=1,
        description="how this host asks for a reboot after reboot_every browser jobs (the"
        " Ansible role sets it); unset -> never reboot: the stack is restarted instead",
    )
    # A stack that failed to start is tried again by itself after this, doubling up to the max (the
    # half-open state of a circuit breaker); meanwhile its host runs every job but browser jobs.
    stack_retry_base_s: float = Field(
        default=60.0,
        gt=0,
        description="a browser stack that failed to start is retried after this, doubling;"
        " meanwhile the host runs every other job",
    )
    stack_retry_max_s: float = Field(
        default=1800.0, gt=0, description="the longest wait between stack retries"
    )

    @field_validator("browser_proxy")
    @classmethod
    def _browser_proxy_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        validate_browser_proxy(value.get_secret_value())
        return value

    @field_validator("browser_user_agent")
    @classmethod
    def _browser_user_agent(cls, value: str | None) -> str | None:
        return None if not value else validate_user_agent(value)

    @field_validator("browser_locale")
    @classmethod
    def _browser_locale(cls, value: str | None) -> str | None:
        return None if not value else validate_locale(value)

    @field_validator("browser_timezone")
    @classmethod
    def _browser_timezone(cls, value: str | None) -> str | None:
        return None if not value else validate_timezone(value)
