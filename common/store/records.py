"""What goes into the store's functions and what comes out of them: plain frozen records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scrapefleet.common.constants import LAST_ERROR_MAX_CHARS
from scrapefleet.common.errors import SubmitError

__all__ = [
    "Claim",
    "ClaimedJob",
    "DueWebhook",
    "Heartbeat",
    "HostSpec",
    "InsertResult",
    "JobFilter",
    "NewJob",
    "PendingJob",
    "Registration",
    "bounded_error",
]

# Room left under the CHECK for what a statement appends (" (blocked 3 times)").
_ERROR_ROOM_CHARS = 200


def bounded_error(text: str, limit: int = LAST_ERROR_MAX_CHARS - _ERROR_ROOM_CHARS) -> str:
    """An error as ``jobs.last_error`` holds it (migration 0031's CHECK): a longer one keeps its
    head (where it began) and its end (the exception's line), and says how much was cut."""
    if len(text) <= limit:
        return text
    keep = limit - 80  # the marker's room
    head = keep // 4
    marker = f"\n... {len(text) - keep} characters cut ...\n"
    return text[:head] + marker + text[len(text) - (keep - head) :]


# -- jobs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewJob:
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int | None = None  # None -> the settings' default
    not_before: datetime | None = None
    dedupe_key: str | None = None
    lock_key: str | None = None
    callback_url: str | None = None  # POSTed when the job completes or fails for good
    # Only a host whose browser stack takes them runs it; None: from its kind's action.
    needs_browser: bool | None = None
    rate_key: str | None = None  # its politeness limits' key (common.jobs.rate_limits)
    proxy_pool: str | None = None  # each attempt leases a proxy of it (common.identities)
    proxy_session: str | None = None  # its sticky session's key: one proxy for its jobs
    traceparent: str | None = None  # its trace (common.tracing); None: a new one
    trace_link: str | None = None  # a trace its own links to (a bulk submit's span)


@dataclass(frozen=True)
class InsertResult:
    ids: list[int]  # of the jobs inserted, in input order
    skipped_duplicates: int  # rows whose dedupe key matched an unfinished job


@dataclass(frozen=True)
class PendingJob:
    id: int
    lock_key: str | None
    needs_browser: bool = False
    profiles: tuple[
        str, ...
    ] = ()  # the pool it may run under (common.browser.profile_names); () for none
    last_profile: str | None = None  # the profile its last try ran under
    blocked_on_host: str | None = None  # the host a site last blocked it on (store.blocks)
    priority: int = 0
    kind: str = ""
    rate_key: str | None = None  # common.jobs.rate_limits
    lingering_on_host: str | None = None  # may still run an ended attempt of it (store 0016)
    pinned_host: str | None = None  # submit --host: it runs on this host or nowhere (0027)
    proxy_pool: str | None = None  # each attempt leases a proxy of it (common.identities)
    last_proxy: int | None = None  # the proxy its last attempt held
    proxy_session: str | None = None  # its sticky session's key


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    kind: str
    payload: dict[str, Any]
    attempt: int  # this attempt's number, 1-based
    max_attempts: int
    lock_key: str | None
    needs_browser: bool = False
    profile: str | None = None  # the persistent profile it runs in (common.browser.profile_names)
    # This attempt's token: the job's claim count at this claim (jobs.claims), never the same
    # for two attempts of one job; every write of the attempt is conditional on it.
    claim: int = 0
    proxy_pool: str | None = None  # the pool it must go out through (common.identities)
    proxy_id: int | None = None  # the pool proxy leased to this attempt
    # Its URL with its credentials, read for this attempt only: never shown (not in repr).
    proxy_url: str | None = field(default=None, repr=False)
    proxy_block_statuses: tuple[int, ...] = ()  # HTTP statuses its pool takes for a block
    # Its sticky session's cookie jar and user agent (store.proxies.StoredSession), read for
    # this attempt only: never shown (not in repr). None: the job is in no session.
    session: Any = field(default=None, repr=False)
    # Its trace (common.tracing): the spans of the attempt are children of it.
    traceparent: str | None = None
    trace_link: str | None = None  # a spawned job's parent's traceparent

    @property
    def key(self) -> tuple[int, int]:
        """The attempt's identity: (job id, claim)."""
        return self.id, self.claim


@dataclass(frozen=True)
class Heartbeat:
    host_state: str | None  # None: the host has no row
    gone: frozenset[tuple[int, int]]  # attempts (job id, claim) no longer this host's to run


@dataclass(frozen=True)
class Claim:
    jobs: list[ClaimedJob]
    jobs_since_restart: int
    jobs_since_boot: int
    more: bool = True  # jobs of this host were left queued (claim again when a slot frees)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs an operator command acts on: explicit ids, or every job matching the rest."""

    ids: Sequence[int] = ()
    kind: str | None = None
    host: str | None = None

    def params(self) -> dict[str, Any]:
        """The bind parameters of the store's job filter (None: that part matches all); never
        all of them None, so that no command acts on every job by omission."""
        if not (self.ids or self.kind or self.host):
            raise SubmitError("name job ids or a filter (--kind, --host); refusing to act on all")
        return {
            "ids": list(self.ids) if self.ids else None,
            "kind": self.kind or None,
            "host": self.host or None,
        }


# -- hosts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSpec:
    name: str
    capacity: int
    address: str | None = None
    ssh_port: int = 22
    ssh_user: str = "scrapefleet"
    ssh_key_file: str | None = None
    known_hosts_file: str | None = None


@dataclass(frozen=True)
class Registration:
    capacity: int
    state: str
    jobs_since_restart: int
    jobs_since_boot: int


# -- webhooks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DueWebhook:
    id: int
    job_id: int
    status: str
    url: str
    payload: dict[str, Any]
    attempt: int  # this attempt's number, 1-based
    receiver: str = ""  # the URL's host:port, lower case: the unit of the per-receiver cap
    payload_bytes: int = 0  # its body's size as JSON text: what the sender's budget counts
