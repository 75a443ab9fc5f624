"""Settings of the producer: its cycle and probes, when a host is offline and a job rescued, the
fleet-wide politeness limits it enforces, and its background work (webhooks, retention, the
SSH probe's defaults).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from scrapefleet.common import constants as C
from scrapefleet.common.jobs.rate_limits import RateLimit, check_rate_key


class ProducerSettings(BaseModel):
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
        le=C.LOCK_LINGER_LIMIT_S,
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
    spawn_per_host_per_minute: int = Field(
        default=C.SPAWN_PER_HOST_PER_MINUTE,
        ge=1,
        le=1_000_000,
        description=(
            "jobs one consumer host may spawn a minute (children of its completions); the "
            "database refuses a completion past it. The producer writes it to the database "
            "at start"
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

    # Webhooks: POSTed by the producer when a job with a callback_url completes or fails. The
    # secrets' length and the networks are checked in common.settings, with the other groups'.
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

    # SSH probe: producer/probes/ssh_probe.py. Fleet-wide defaults; a host's own row overrides
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

    @field_validator("rate_limits")
    @classmethod
    def _rate_keys(cls, value: dict[str, RateLimit]) -> dict[str, RateLimit]:
        for key in value:
            check_rate_key(key)
        return value
