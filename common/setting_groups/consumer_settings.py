"""Settings of a consumer: its host, its claim loop and heartbeat, how long a job may run, and
what becomes of an attempt that fails (retries, error classes) or is blocked (block detection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from scrapefleet.common import constants as C
from scrapefleet.common.actions.bounded_regex import compile_pattern


class ConsumerSettings(BaseModel):
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

    result_max_bytes: int = Field(
        default=C.RESULT_MAX_BYTES,
        ge=1024,
        le=C.RESULT_MAX_BYTES_LIMIT,
        description=(
            "a job whose result (as JSON) is larger fails, not retried, saying so; the "
            "database refuses any result over 8 MiB"
        ),
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
    backoff_max_s: float = Field(
        default=600.0,
        ge=0,
        le=C.RETRY_AFTER_LIMIT_S,
        description="longest retry delay (at most 7 days: the database refuses a later one)",
    )
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
    # How fetch_page and screenshot know a block page (consumer.browser.actions.block_detection);
    # any one match is a block.
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
            "page's title (its first 1,000 characters, with a time bound), e.g. "
            "`(?i)access denied|just a moment`"
        ),
    )

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
        # Compiled as it runs: on the bounded engine (common.actions.bounded_regex).
        compile_pattern(value, "block_title_pattern")
        return value
