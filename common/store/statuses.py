"""Job statuses, host states, and the one table of the moves allowed between them.

Everything else spells a status through these: common.db.tables builds its CHECK constraints and
partial indexes from the enums, the store's statements their literals and their ``WHERE status
IN (...)`` lists from the table, and tests hold the views, the live constraints and the audit
trail to it. Rules that decide a status (attempts or releases exhausted) are here too, once, as
a pure function and the SQL fragment that says the same.

Loads no SQLAlchemy: a module that only needs the names (the consumer's status command, run
once per probe over SSH) can import this alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple

__all__ = [
    "ATTEMPTS_EXHAUSTED_SQL",
    "FINISHED",
    "IN_FLIGHT",
    "PAGE_RELEASES_EXHAUSTED_SQL",
    "RELEASES_EXHAUSTED",
    "RELEASES_EXHAUSTED_SQL",
    "TRANSITIONS",
    "UNFINISHED",
    "Actor",
    "HostState",
    "JobStatus",
    "Transition",
    "attempts_exhausted",
    "host_transitions",
    "job_transitions",
    "sources",
    "sql_list",
]


class JobStatus(StrEnum):
    PENDING = "pending"  # waiting for the producer (and for not_before)
    QUEUED = "queued"  # assigned to a host, not yet claimed by it
    PROCESSING = "processing"  # an attempt is running on its host
    COMPLETED = "completed"
    FAILED = "failed"  # attempts (or releases) exhausted, or a non-retryable error
    CANCELLED = "cancelled"


class HostState(StrEnum):
    ACTIVE = "active"  # takes work
    DRAINING = "draining"  # finishes what it runs, takes nothing new
    RESTARTING = "restarting"  # its browser stack is being restarted
    REBOOTING = "rebooting"
    OFFLINE = "offline"  # the producer's probes fail, or its consumer stopped
    DISABLED = "disabled"  # out of the fleet until an operator enables it


class Actor(StrEnum):
    SUBMITTER = "submitter"  # the Python API, the CLI, the dashboard's submit
    PRODUCER = "producer"
    CONSUMER = "consumer"
    OPERATOR = "operator"  # a person, through the CLI or the dashboard


# Groups the statements and indexes share; their order is the flow's.
UNFINISHED = (JobStatus.PENDING, JobStatus.QUEUED, JobStatus.PROCESSING)
IN_FLIGHT = (JobStatus.QUEUED, JobStatus.PROCESSING)  # held by a host
FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)

Status = JobStatus | HostState


class Transition(NamedTuple):
    """``function`` (a store function) may move a row from ``source`` to ``target`` when
    ``actor`` calls it. None as the source: the row is created; as the target: it leaves the
    table (archived, removed)."""

    source: Status | None
    target: Status | None
    actor: Actor
    function: str


_J, _H, _A = JobStatus, HostState, Actor
_RELEASED_TO = (_J.PENDING, _J.FAILED)  # a release ends failed once releases are exhausted

TRANSITIONS: tuple[Transition, ...] = (
    # -- jobs
    Transition(None, _J.PENDING, _A.SUBMITTER, "insert_jobs"),
    Transition(_J.PENDING, _J.QUEUED, _A.SUBMITTER, "pin_jobs_to_host"),  # a canary, say
    Transition(_J.PENDING, _J.QUEUED, _A.PRODUCER, "assign_jobs"),
    Transition(_J.QUEUED, _J.PENDING, _A.PRODUCER, "requeue_from_unavailable_hosts"),
    *(Transition(_J.PROCESSING, t, _A.PRODUCER, "rescue_stale_processing") for t in _RELEASED_TO),
    Transition(_J.QUEUED, _J.PROCESSING, _A.CONSUMER, "claim_jobs"),
    Transition(_J.PROCESSING, _J.COMPLETED, _A.CONSUMER, "complete_job"),
    Transition(_J.PROCESSING, _J.COMPLETED, _A.CONSUMER, "complete_jobs"),
    Transition(_J.PROCESSING, _J.PENDING, _A.CONSUMER, "fail_attempt"),  # retried later
    Transition(_J.PROCESSING, _J.FAILED, _A.CONSUMER, "fail_attempt"),
    *(Transition(_J.PROCESSING, t, _A.CONSUMER, "release_job") for t in _RELEASED_TO),
    *(Transition(_J.PROCESSING, t, _A.CONSUMER, "release_blocked") for t in _RELEASED_TO),
    *(Transition(_J.PROCESSING, t, _A.CONSUMER, "recover_host_jobs") for t in _RELEASED_TO),
    Transition(_J.QUEUED, _J.PENDING, _A.CONSUMER, "requeue_host_queued"),
    Transition(_J.QUEUED, _J.PENDING, _A.CONSUMER, "record_reboot_request"),
    Transition(_J.QUEUED, _J.PENDING, _A.CONSUMER, "record_stack_failure"),  # browser jobs
    Transition(_J.QUEUED, _J.PENDING, _A.OPERATOR, "drain_host"),
    Transition(_J.QUEUED, _J.PENDING, _A.OPERATOR, "remove_host"),
    Transition(_J.PENDING, _J.CANCELLED, _A.OPERATOR, "cancel_jobs"),
    Transition(_J.QUEUED, _J.CANCELLED, _A.OPERATOR, "cancel_jobs"),
    Transition(_J.PROCESSING, _J.CANCELLED, _A.OPERATOR, "stop_jobs"),  # its host ends it
    Transition(_J.FAILED, _J.PENDING, _A.OPERATOR, "retry_jobs"),
    Transition(_J.CANCELLED, _J.PENDING, _A.OPERATOR, "retry_jobs"),
    *(Transition(s, None, _A.PRODUCER, "archive_finished_jobs") for s in FINISHED),
    # -- hosts
    Transition(None, _H.ACTIVE, _A.OPERATOR, "add_host"),
    Transition(None, _H.ACTIVE, _A.CONSUMER, "register_consumer"),
    *(
        Transition(s, _H.ACTIVE, _A.CONSUMER, "register_consumer")
        for s in (_H.RESTARTING, _H.REBOOTING, _H.OFFLINE)
    ),
    Transition(_H.DRAINING, _H.ACTIVE, _A.CONSUMER, "reactivate_after_own_drain"),
    Transition(_H.ACTIVE, _H.DRAINING, _A.CONSUMER, "set_host_state"),  # its own warm stop
    Transition(_H.DRAINING, _H.OFFLINE, _A.CONSUMER, "set_host_state"),  # ... and its end
    Transition(_H.ACTIVE, _H.RESTARTING, _A.CONSUMER, "set_host_state"),
    Transition(_H.ACTIVE, _H.REBOOTING, _A.CONSUMER, "set_host_state"),
    Transition(_H.RESTARTING, _H.REBOOTING, _A.CONSUMER, "set_host_state"),
    Transition(_H.RESTARTING, _H.ACTIVE, _A.CONSUMER, "set_host_state"),
    Transition(_H.REBOOTING, _H.ACTIVE, _A.CONSUMER, "set_host_state"),
    *(
        Transition(s, _H.OFFLINE, _A.PRODUCER, "set_host_state")  # probes fail
        for s in (_H.ACTIVE, _H.RESTARTING, _H.REBOOTING)
    ),
    Transition(_H.OFFLINE, _H.ACTIVE, _A.PRODUCER, "set_host_state"),  # answers, says active
    *(Transition(s, _H.DRAINING, _A.OPERATOR, "drain_host") for s in _H if s is not _H.DRAINING),
    *(
        Transition(s, _H.ACTIVE, _A.OPERATOR, "enable_host")  # offline: only a probe answers
        for s in _H
        if s not in (_H.ACTIVE, _H.OFFLINE)
    ),
    *(
        Transition(s, _H.DISABLED, _A.OPERATOR, "set_host_state")
        for s in _H
        if s is not _H.DISABLED
    ),
    *(Transition(s, None, _A.OPERATOR, "remove_host") for s in _H),
)


def job_transitions() -> tuple[Transition, ...]:
    return tuple(t for t in TRANSITIONS if isinstance(t.source or t.target, JobStatus))


def host_transitions() -> tuple[Transition, ...]:
    return tuple(t for t in TRANSITIONS if isinstance(t.source or t.target, HostState))


_RANK: dict[Status, int] = {s: n for n, s in enumerate([*JobStatus, *HostState])}


def sources(function: str, target: Status | None) -> tuple[Status, ...]:
    """The statuses ``function`` may move a row out of into ``target``, in the enum's order: the
    ``WHERE status IN (...)`` of its statement."""
    found = {t.source for t in TRANSITIONS if t.function == function and t.target == target}
    if not found or None in found:
        raise LookupError(f"no move of {function} into {target} out of an existing status")
    return tuple(sorted((s for s in found if s is not None), key=_RANK.__getitem__))


def sql_list(statuses: Iterable[str]) -> str:
    """``('queued', 'processing')``: the statuses as an SQL list. They need no escaping, being
    plain lowercase words; anything else is refused rather than quoted."""
    values = [str(s) for s in statuses]
    if not all(v.isidentifier() and v.islower() for v in values):
        raise ValueError(f"not a status: {values}")
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# -- the rules that decide a status, each once -----------------------------------------------

# Out of attempts: a failed attempt is not retried. ``attempt`` is the number of the attempt that
# just ended (1-based), so the job has used that many.
ATTEMPTS_EXHAUSTED_SQL = "attempts >= max_attempts"


def attempts_exhausted(attempt: int, max_attempts: int) -> bool:
    """The Python side of ATTEMPTS_EXHAUSTED_SQL: the attempt that just failed was the last."""
    return attempt >= max_attempts


# Out of releases: a release hands an attempt back (the host failed, not the job) and never
# spends one, so it has its own bound, or a job that takes every host down would loop forever.
# Evaluated before the release is counted: the release that meets it is the one that fails.
RELEASES_EXHAUSTED_SQL = "releases >= :max_releases"
# Only the releases its page caused (the browser died under it) count towards that bound
# (migration 0016): a host's own faults (its consumer killed, a rescue, no session, a lapsed
# lease) never fail a job. Evaluated the same way, before the release is counted.
PAGE_RELEASES_EXHAUSTED_SQL = "page_releases >= :max_releases"
RELEASES_EXHAUSTED = RELEASES_EXHAUSTED_SQL  # its name before the store was split
