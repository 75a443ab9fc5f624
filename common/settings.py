"""Settings from environment variables (SCRAPEFLEET_*) and an optional TOML file.

Precedence: keyword arguments > environment > TOML file (SCRAPEFLEET_CONFIG or --config) >
defaults from common.constants. An invalid value raises SettingsError naming the setting.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as EnvParseError

from scrapefleet.common import constants as C
from scrapefleet.common.browser.options import (
    validate_browser_proxy,
    validate_locale,
    validate_timezone,
)
from scrapefleet.common.errors import SettingsError
from scrapefleet.common.http.params import validate_proxy_url, validate_user_agent
from scrapefleet.common.jobs.rate_limits import RateLimit, check_rate_key

CONFIG_ENV = "SCRAPEFLEET_CONFIG"
ENV_PREFIX = "SCRAPEFLEET_"
# The project's own variables that are not settings, so not refused as unknown: the config
# file; the browser stack's process markers (set in the Grid's environment and inherited by all
# it starts); the test and benchmark harnesses' knobs, which reach the daemons they start.
NOT_SETTINGS = frozenset(
    {
        CONFIG_ENV,
        "SCRAPEFLEET_STACK_TOKEN",
        "SCRAPEFLEET_STACK_DIR",
        "SCRAPEFLEET_FLEET_RUN",
        "SCRAPEFLEET_FLEET_MODE",
        "SCRAPEFLEET_DOCS_SCREENSHOTS",
    }
)
NOT_SETTINGS_PREFIXES = ("SCRAPEFLEET_TEST_", "SCRAPEFLEET_BENCH_")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


class Settings(BaseSettings):
    # allow_inf_nan=False: "1e999" parses as infinity, which no timeout or interval means.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, allow_inf_nan=False
    )

    # Where everything lives.
    database_url: str | None = Field(
        default=None, description="PostgreSQL URL; unset -> the demo starts an embedded server"
    )
    database_pooler: Literal["none", "pgbouncer"] = Field(
        default="none",
        description=(
            "`pgbouncer`: `database_url` is a PgBouncer in transaction pooling "
            "(consumers only; docs/how-to/pgbouncer.md): no prepared statements, no"
            " session settings sent"
        ),
    )
    listen_database_url: str | None = Field(
        default=None,
        description=(
            "a direct PostgreSQL URL for the consumer's one LISTEN connection when "
            "`database_url` is a pooler; unset -> no LISTEN: it polls (as "
            '`consumer_wakeup = "poll"`)'
        ),
    )
    consumer_wakeup: Literal["listen", "poll"] = Field(
        default="listen",
        description=(
            "`listen`: a LISTEN connection wakes the consumer when its host gets "
            "work; `poll`: none, it claims every `consumer_poll_s` and soon after "
            "each of its jobs ends. `poll` past a hundred or two hosts: every "
            "listening connection costs the server CPU at each NOTIFY in the "
            "database (docs/how-to/pgbouncer.md)"
        ),
    )
    state_dir: Path = Field(
        default=Path("/var/lib/scrapefleet"),
        description=(
            "status files; a producer and the consumers on its own machine (hosts "
            "without an address) must share it: the producer reads their status "
            "files there, and says so (`no status file at ...: is its consumer "
            "running, with this producer's state_dir (...)?`) when it finds none"
        ),
    )
    artifacts_dir: Path = Field(
        default=Path("/var/lib/scrapefleet/artifacts"),
        description="failure screenshots, HTML and tracebacks, by job id and attempt",
    )
    # NoDecode: a list setting's environment value reaches _comma_separated as it is, so that
    # "a,b" works as well as JSON.
    actions: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="user actions: 'module' (imported: its @register actions) or"
        " 'module:function' dotted paths (env: comma-separated, or a JSON list); installed"
        " packages' 'scrapefleet.actions' entry points are loaded too",
    )

    # Database connections: common/db/engines.py adds these to every connection unless the URL names
    # them.
    db_keepalives_idle_s: int = Field(
        default=10,
        ge=1,
        description="TCP keepalive on every connection, both ends: first probe after this idle",
    )
    db_keepalives_interval_s: int = Field(default=5, ge=1, description="between probes")
    db_keepalives_count: int = Field(
        default=3, ge=1, description="unanswered probes before the connection is dead"
    )
    db_tcp_user_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="both ends: data (or keepalives) unacknowledged this long -> the connection"
        " is dead; 0 = the OS's",
    )
    db_statement_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="server-side, every session; 0 = the server's setting; migrations: none",
    )
    db_lock_timeout_s: float = Field(
        default=60.0, ge=0, description="server-side; 0 = the server's setting; migrations: none"
    )
    db_idle_in_transaction_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description=(
            "the server ends a session idle this long in a transaction (and frees its row locks)"
        ),
    )
    db_sslmode: (
        Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None
    ) = Field(
        default=None,
        description=(
            "libpq sslmode (`require`, `verify-full`, ...); unset -> libpq's "
            "(PGSSLMODE, else prefer)"
        ),
    )
    leader_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a transaction on the producer's lock connection not answered in this"
        " long ends that connection: the producer steps down",
    )
    leader_idle_timeout_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "the server ends a producer's lock session idle this long, freeing a "
            "vanished leader's lock even behind a proxy that keeps TCP alive; unset"
            " -> the larger of 60 s and 4 x producer_interval_s; 0 = never"
        ),
    )

    # Fleet.
    capacity: int = Field(
        default=6,
        ge=1,
        le=64,
        description="jobs a host runs at once (hosts added without --capacity)",
    )
    # What leaks is the browser: each WebDriver session is replaced after browser_retire_every
    # of its own jobs, inside the running Grid. The whole stack is restarted far less often: a
    # JVM and every browser started again cost ~7 s of CPU, as much as the 20 pages before it
    # (docs/browser-benchmark.md).
    restart_every: int = Field(
        default=80,
        ge=0,
        description="the whole browser stack (Grid, Xvfb and every browser) is restarted after"
        " this many browser jobs; 0 = never",
    )
    browser_retire_every: int = Field(
        default=20,
        ge=0,
        description="each browser session is quit and replaced after this many of its own"
        " jobs, in the running Grid (browsers are what leaks); 0 = only with the stack",
    )
    overlap_restarts: bool = Field(
        default=True,
        description="start the next browser stack beside the running one before the restart"
        " budget and switch to it at the budget (false: drain, stop, then start)",
    )
    # host rebooted after this many claims since boot
    reboot_every: int = Field(default=80, ge=0, description="0 = never")

    # Producer.
    producer_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="full producer cycle (probe, health, rescue, assign)",
    )
    probe_timeout_s: float = Field(default=3.0, gt=0, description="one probe round, per host")
    probe_failures_offline: int = Field(
        default=3,
        ge=1,
        description="probe failures in a row before a host is offline",
    )
    offline_grace_s: float = Field(
        default=60.0,
        ge=0,
        description="offline this long -> its queued jobs go back to pending",
    )
    probe_start_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="for this long after taking the lead, a producer does not count the failed"
        " probes of a host that has not answered it yet (its consumer may still be starting);"
        " 0 = count from the first probe",
    )
    rescue_after_s: float = Field(
        default=60.0,
        gt=0,
        description="processing job without heartbeat this long -> back to pending",
    )
    lock_linger_s: float = Field(
        default=60.0,
        ge=0,
        description=(
            "a rescued, stopped or timed-out attempt holds its lock key until its "
            "host confirms it ended, or this long (docs/attempts-and-locks.md)"
        ),
    )
    local_state_stale_s: float = Field(
        default=15.0,
        gt=0,
        description="a status document older than this (on its host's clock) is a dead consumer",
    )

    min_memory_available_fraction: float = Field(
        default=0.15, ge=0, le=1, description="a host with less memory free gets no new job"
    )
    wake_debounce_s: float = Field(
        default=0.005,
        ge=0,
        description=(
            "a finished-job or submit NOTIFY waits this long before a wake cycle, "
            "so that a burst costs one; after four of these without a wake, the "
            "next wakes the producer at once"
        ),
    )
    # Politeness (common.jobs.rate_limits), enforced fleet-wide by the producer.
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict,
        description=(
            "per rate key, fleet-wide: `{concurrency = N, per_minute = N}` (either "
            'or both), e.g. `rate_limits = {"example.org" = {concurrency = 2, '
            "per_minute = 30}}`; env: JSON (docs/how-to/rate-limits.md)"
        ),
    )
    rate_limit_default: RateLimit | None = Field(
        default=None,
        description=(
            "the limits of every rate key not named in `rate_limits`, e.g. "
            "`{concurrency = 4}`; unset -> none"
        ),
    )
    kind_limits: dict[str, RateLimit] = Field(
        default_factory=dict,
        description=(
            "per kind, the same way: a fleet-wide cap per action (a paid API's "
            'concurrency), e.g. `{"screenshot" = {concurrency = 10}}`'
        ),
    )

    # Consumer.
    host_name: str | None = Field(
        default=None, description="this consumer's host; unset -> hostname"
    )
    boot_id_file: Path = Field(
        default=Path("/proc/sys/kernel/random/boot_id"),
        description="a new boot id resets jobs_since_boot",
    )
    consumer_poll_s: float = Field(
        default=1.0, gt=0, description="claim poll when no NOTIFY arrives"
    )
    heartbeat_s: float = Field(
        default=5.0, gt=0, description="job and host heartbeat, status file rewrite"
    )
    job_timeout_s: float = Field(default=300.0, gt=0, description="hard limit of one attempt")
    drain_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="a consumer's warm stop waits this long for running jobs, then stops cold"
        " (they go back to pending); unset -> the longest of job_timeout_s and the actions'"
        " own timeout_s",
    )

    # http_get (common/http/client.py): the host's defaults; a job's own params win.
    http_user_agent: str = Field(
        default="scrapefleet/0.1",
        description="`http_get`'s User-Agent unless the job sets `user_agent`",
    )
    http_contact_url: str | None = Field(
        default=None,
        description=(
            "a page or `mailto:` where sites reach the fleet's operator, sent in "
            "the User-Agent (`scrapefleet/0.1 (+URL)`); unset -> none"
        ),
    )
    # Crawls (common.crawl.action): what a crawl obeys unless told otherwise.
    crawl_obey_robots: bool = Field(
        default=True,
        description=(
            "crawls read each site's robots.txt and skip what it disallows (docs/crawling.md)"
        ),
    )
    # a crawled site's jobs queued or running at once, by default
    crawl_site_concurrency: int | None = Field(
        default=2,
        ge=1,
        description=(
            "a crawled site's jobs queued or running at once, fleet-wide, unless "
            "`rate_limits`/`rate_limit_default` give it limits; unset -> none"
        ),
    )
    http_proxy: SecretStr | None = Field(
        default=None,
        description=(
            "`http://`, `https://` or `socks5://` URL (`user:password@` allowed) "
            "every `http_get` goes through unless the job sets `proxy`; unset -> "
            "direct"
        ),
    )
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
        description="a profile whose job was blocked gets no job for this long (0-30 days)",
    )
    http_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description=(
            "one `http_get`, whole: connect, redirects and the last body byte, "
            "unless the job sets `timeout_s`"
        ),
    )
    http_max_body_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description=(
            "an `http_get` body is read up to this (decompressed); the rest is cut (`truncated`)"
        ),
    )
    http_allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="CIDRs http_get, crawl and robots.txt requests may reach although internal"
        " (loopback, private, link-local, ...), also through a redirect; unset -> only public"
        " addresses. An intranet fleet: 10.0.0.0/8,192.168.0.0/16; no rule: 0.0.0.0/0,::/0",
    )

    # Retries.
    max_attempts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="attempts per job unless the job says otherwise",
    )
    backoff_base_s: float = Field(
        default=5.0,
        ge=0,
        description="delay after the 1st failed attempt; doubles, +/-20% jitter",
    )
    backoff_max_s: float = Field(default=600.0, ge=0, description="longest retry delay")
    # Error classes (common.actions.error_classes).
    retry_after_max_s: float = Field(
        default=3600.0,
        ge=0,
        le=C.RETRY_AFTER_LIMIT_S,
        description=(
            "a rate-limited attempt's `Retry-After` is honoured up to this long "
            "(docs/how-to/error-classes.md)"
        ),
    )
    # A blocked attempt is handed back the same way (not failed), at most this many times.
    max_blocks_per_job: int = Field(
        default=3,
        ge=1,
        le=100,
        description=(
            "a job blocked this many times fails (class `blocked`); each block "
            "before sends it back to pending without using an attempt"
        ),
    )
    # How fetch_page and screenshot know a block page (consumer.browser.block_detection); any one
    # match is a block.
    block_statuses: Annotated[list[int], NoDecode] = Field(
        default_factory=list,
        description=(
            "`fetch_page` and `screenshot`: HTTP statuses of a block page, e.g. "
            "`403,429` (comma-separated in the environment)"
        ),
    )
    block_selector: str | None = Field(
        default=None,
        description=(
            "`fetch_page` and `screenshot`: a CSS selector present only on a block "
            "page, e.g. `#challenge-form`"
        ),
    )
    block_title_pattern: str | None = Field(
        default=None,
        description=(
            "`fetch_page` and `screenshot`: a regular expression searched in the "
            "page's title, e.g. `(?i)access denied|just a moment`"
        ),
    )

    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR")
    log_format: Literal["text", "json"] = Field(
        default="text", description="text: key=value lines for people; json: one object a line"
    )

    # Metrics (Prometheus), one port per daemon.
    metrics_port: int = Field(default=0, ge=0, le=65535, description="0 = no metrics endpoint")
    metrics_address: str = Field(
        default="127.0.0.1", min_length=1, description="where /metrics listens"
    )
    metrics_refresh_s: float = Field(
        default=10.0, gt=0, description="producer: job/host gauges from SQL"
    )

    # Dashboard (`scrapefleet dashboard`).
    dashboard_address: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="where `scrapefleet dashboard` listens (a non-loopback address needs"
        " dashboard_allow_remote)",
    )
    dashboard_port: int = Field(default=8080, ge=1, le=65535, description="the dashboard's port")
    dashboard_token: SecretStr | None = Field(
        default=None, description="required by every control; unset -> read-only dashboard"
    )
    dashboard_read_needs_token: bool = Field(
        default=False,
        description="true -> every page needs dashboard_token too (one login per browser"
        " session), not only the controls",
    )
    dashboard_session_idle_s: float = Field(
        default=28800.0,
        gt=0,
        description="a browser's dashboard session (form token, unlocked controls) ends after"
        " this long unused; sessions live in memory, so a restart ends them all",
    )
    dashboard_proxies: int = Field(
        default=0,
        ge=0,
        le=5,
        description="reverse proxies in front whose X-Forwarded-For/-Proto/-Host/-Port/-Prefix"
        " are trusted; 0 -> those headers are ignored",
    )
    dashboard_allow_remote: bool = Field(
        default=False,
        description="allow dashboard_address to be a non-loopback address (also"
        " --allow-remote); put TLS in front",
    )
    dashboard_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host names the dashboard answers to besides IP addresses and localhost"
        " (a DNS-rebinding page's name is refused)",
    )

    # Webhooks: POSTed by the producer when a job with a callback_url completes or fails.
    webhook_secret: SecretStr | None = Field(
        default=None, description="HMAC-SHA256 key; unset -> deliveries wait, unsent"
    )
    webhook_secret_previous: SecretStr | None = Field(
        default=None,
        description="while rotating: the old key; each POST is signed with both",
    )
    webhook_allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            'CIDRs webhooks may reach although internal, e.g. `["10.20.0.0/16"]` '
            "(env: comma-separated, or a JSON list)"
        ),
    )
    webhook_max_attempts: int = Field(
        default=10, ge=1, le=100, description="then the delivery is given up"
    )
    webhook_interval_s: float = Field(default=1.0, gt=0, description="delivery loop period")
    webhook_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="one POST, whole: DNS, connect, TLS, send, the answer's headers",
    )
    webhook_backoff_base_s: float = Field(default=5.0, ge=0, description="doubles per failure")
    webhook_backoff_max_s: float = Field(
        default=3600.0,
        ge=0,
        description="the longest wait between delivery attempts",
    )

    # Retention, run by the producer.
    retention_days: float = Field(
        default=30.0,
        gt=0,
        description="finished jobs older than this move to jobs_archive",
    )
    retention_interval_s: float = Field(
        default=3600.0,
        gt=0,
        description="how often the producer moves finished jobs to jobs_archive",
    )
    retention_batch_rows: int = Field(
        default=1000, ge=1, le=100_000, description="rows moved per transaction"
    )

    # SSH probe: producer/ssh_probe.py. Fleet-wide defaults; a host's own row overrides
    # user, key file and known_hosts.
    ssh_user: str = Field(default="scrapefleet", description="service user on consumer hosts")
    ssh_key_file: Path | None = Field(default=None, description="producer's private key")
    ssh_known_hosts_file: Path | None = Field(
        default=None, description="known_hosts the host keys are verified against (no auto-add)"
    )
    ssh_status_command: str = Field(
        default="scrapefleet-consumer status --json",
        description=(
            "'--host NAME' is appended; a key's forced command (docs/probes.md) answers instead"
        ),
    )
    ssh_probe_workers: int = Field(default=16, ge=1, le=256, description="hosts probed at once")
    ssh_reconnect_base_s: float = Field(default=1.0, ge=0, description="doubles per failure")
    ssh_reconnect_max_s: float = Field(
        default=30.0, ge=0, description="the longest wait before reconnecting to a host"
    )

    # Browser stack: consumer/browser/stack.py, selenium_actions.py, artifacts.py.
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
    browser_user: str | None = Field(
        default=None,
        min_length=1,
        description="run Xvfb, the Grid and Chromium as this user (needs root or CAP_SETUID);"
        " unset -> the consumer's own",
    )
    browser_agent_socket: Path | None = Field(
        default=None,
        description="with browser_user: the browser agent's socket, which starts and ends the"
        " stack as that user (consumer.browser.browser_agent), so the consumer needs no"
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

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("dashboard_token", "webhook_secret", "webhook_secret_previous")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        # An empty string in the environment means "unset", not "a token that is empty".
        if value is None or value.get_secret_value() == "":
            return None
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @field_validator(
        "actions",
        "webhook_allow_networks",
        "http_allow_networks",
        "dashboard_hosts",
        "browser_block",
        "block_statuses",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # The documented form, SCRAPEFLEET_ACTIONS=mypkg.scrapers:prices, is not JSON.
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"not a JSON list ({exc.msg}); or give items separated by commas"
                ) from None
        return [item.strip() for item in text.split(",") if item.strip()]

    @field_validator("webhook_allow_networks", "http_allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or CIDR network") from None
        return value

    @field_validator("dashboard_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        for item in value:
            if not HOST_NAME.fullmatch(item):
                raise ValueError(f"{item!r} is not a host name (no scheme, port or path)")
        return [item.lower().rstrip(".") for item in value]

    @field_validator("block_statuses")
    @classmethod
    def _http_statuses(cls, value: list[int]) -> list[int]:
        for status in value:
            if not 100 <= status <= 599:
                raise ValueError(f"{status} is not an HTTP status (100 to 599)")
        return value

    @field_validator("block_selector")
    @classmethod
    def _css_selector(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if len(value) > 1024 or any(ord(c) < 32 for c in value):
            raise ValueError("must be one line of at most 1024 characters")
        return value.strip()

    @field_validator("block_title_pattern")
    @classmethod
    def _title_pattern(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression ({exc})") from None
        return value

    @field_validator("http_proxy")
    @classmethod
    def _proxy_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        validate_proxy_url(value.get_secret_value())
        return value

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

    @field_validator("http_user_agent")
    @classmethod
    def _user_agent(cls, value: str) -> str:
        return validate_user_agent(value)

    @field_validator("http_contact_url")
    @classmethod
    def _contact(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("http://", "https://", "mailto:")):
            raise ValueError("must start with http://, https:// or mailto:")
        return validate_user_agent(value)

    def http_agent(self) -> str:
        """The User-Agent http_get and crawls send: the product, and the contact if set."""
        if self.http_contact_url is None:
            return self.http_user_agent
        return f"{self.http_user_agent} (+{self.http_contact_url})"

    @field_validator("rate_limits")
    @classmethod
    def _rate_keys(cls, value: dict[str, RateLimit]) -> dict[str, RateLimit]:
        for key in value:
            check_rate_key(key)
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return value.upper()


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build Settings, turning any validation problem into one SettingsError line."""
    file_values: dict[str, Any] = {}
    path = config_file or os.environ.get(CONFIG_ENV)
    if path:
        try:
            with open(path, "rb") as handle:
                file_values = tomllib.load(handle)
        except OSError as exc:
            raise SettingsError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {path}: {exc}") from None
    unknown_environment_check(os.environ)
    # Environment beats the file: drop file keys that the environment sets.
    for key in list(file_values):
        if f"{ENV_PREFIX}{key.upper()}" in os.environ:
            del file_values[key]
    try:
        return Settings(**{**file_values, **overrides})
    except ValidationError as exc:
        raise SettingsError(_first_problem(exc)) from None
    except EnvParseError as exc:  # pydantic-settings' own, raised before validation
        raise SettingsError(f"invalid setting: {exc}") from None


def unknown_environment_check(environ: Mapping[str, str]) -> None:
    """Refuse a SCRAPEFLEET_* variable that is no setting, naming it: a typo would otherwise
    leave the setting at its default without a word (an unknown TOML key is refused too)."""
    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper in NOT_SETTINGS:
            continue
        if upper.startswith(NOT_SETTINGS_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SettingsError(f"unknown setting {key} in the environment{hint}")


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    name = ".".join(str(p) for p in err["loc"]) or "settings"
    env = f"{ENV_PREFIX}{str(err['loc'][0]).upper()}" if err["loc"] else ENV_PREFIX
    if err["type"] == "extra_forbidden":
        return f"unknown setting {name!r}"
    message = str(err["msg"]).removeprefix("Value error, ")  # pydantic's, for our own checks
    return f"invalid setting {name} ({env}): {message}"


def setting_default(name: str) -> Any:
    """A setting's default as its field declares it: code that needs it outside a Settings
    (a function's default argument, a test's expectation) reads it here, never a copy."""
    return Settings.model_fields[name].default
