"""An operator's retry and cancel, decided and explained: pure functions over plain values.

The CLI and the dashboard count what a command would move first (``queries.
jobs_matching_by_status``), then ask these: go ahead, ask first, or refuse; and, when nothing
(or not everything) moved, the one line that says why.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence

from scrapefleet.common.constants import BULK_CONFIRM_OVER_JOBS
from scrapefleet.common.store.operating.job_commands import CANCEL_SOURCES, retry_sources
from scrapefleet.common.store.records import JobFilter
from scrapefleet.common.store.statuses import JobStatus

RETRY = "retry"
CANCEL = "cancel"
PAST = {RETRY: "retried", CANCEL: "cancelled"}
SHOWN_IDS = 10  # ids named in one line; the rest are counted


class Go(enum.Enum):
    ACT = "act"
    ASK = "ask"  # a person at a terminal (or a browser) confirms the count first
    REFUSE = "refuse"  # too many to do unasked, and nobody to ask
    COUNT_ONLY = "count only"  # --dry-run


def movable(action: str, include_cancelled: bool = False) -> tuple[str, ...]:
    """The statuses ``action`` moves jobs out of."""
    if action == CANCEL:
        return tuple(str(s) for s in CANCEL_SOURCES)
    if action == RETRY:
        return tuple(str(s) for s in retry_sources(include_cancelled))
    raise ValueError(f"action must be {RETRY} or {CANCEL}, not {action!r}")


def would_move(by_status: Mapping[str, int], statuses: Iterable[str]) -> int:
    return sum(by_status.get(s, 0) for s in statuses)


def decide(
    count: int,
    *,
    yes: bool,
    dry_run: bool,
    interactive: bool,
    over: int = BULK_CONFIRM_OVER_JOBS,
) -> Go:
    """What to do about a command that would move ``count`` jobs (at least one)."""
    if dry_run:
        return Go.COUNT_ONLY
    if count <= over or yes:
        return Go.ACT
    return Go.ASK if interactive else Go.REFUSE


def _ids(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:SHOWN_IDS])
    more = len(ids) - SHOWN_IDS
    return f"{shown} and {more} more" if more > 0 else shown


def describe(which: JobFilter) -> str:
    """The filter as the operator gave it: "jobs 4, 5", "kind 'noop', host 'h1'"."""
    parts = []
    if which.ids:
        parts.append(f"job{'s' if len(which.ids) > 1 else ''} {_ids(list(which.ids))}")
    if which.kind:
        parts.append(f"kind {which.kind!r}")
    if which.host:
        parts.append(f"host {which.host!r}")
    return ", ".join(parts)


def _hint(action: str, include_cancelled: bool, cancelled: int, include_flag: str) -> str:
    if action == CANCEL:
        return "only pending or queued jobs are cancelled; `jobs stop` ends a running one"
    hint = "only failed jobs are retried"
    if cancelled and not include_cancelled:
        hint += f"; {include_flag} retries cancelled ones too"
    return hint


def _breakdown(by_status: Mapping[str, int]) -> str:
    order = [str(s) for s in JobStatus]
    items = sorted(by_status.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    return ", ".join(f"{n:,} {status}" for status, n in items if n)


def nothing_matched(
    action: str,
    which: JobFilter,
    by_status: Mapping[str, int],
    *,
    include_cancelled: bool = False,
    host_known: bool = True,
    include_flag: str = "--include-cancelled",
) -> str:
    """Why a command moved nothing, in one line (``by_status``: what its filter matches)."""
    total = sum(by_status.values())
    if total == 0:
        if which.host and not host_known:
            return f"no host named {which.host!r}, and no job names it"
        return f"no job matches {describe(which)}"
    hint = _hint(action, include_cancelled, by_status.get(JobStatus.CANCELLED, 0), include_flag)
    return (
        f"nothing to {action}: the {total:,} job(s) matching {describe(which)} are"
        f" {_breakdown(by_status)} ({hint})"
    )


def unmoved_ids(
    action: str,
    ids: Sequence[int],
    moved: Iterable[int],
    statuses: Mapping[int, str],
    *,
    include_cancelled: bool = False,
    include_flag: str = "--include-cancelled",
) -> str | None:
    """One line naming the jobs of ``ids`` that did not move and why (``statuses``: their
    status now; a missing id does not exist); None when every one moved."""
    done = set(moved)
    left = [i for i in dict.fromkeys(ids) if i not in done]
    if not left:
        return None
    groups: dict[str, list[int]] = {}
    for job_id in left:
        groups.setdefault(statuses.get(job_id, ""), []).append(job_id)
    parts = []
    for status, group in groups.items():
        many = len(group) > 1
        name = f"job{'s' if many else ''} {_ids(group)}"
        if not status:
            parts.append(f"{name} {'do' if many else 'does'} not exist")
        else:
            parts.append(f"{name} {'are' if many else 'is'} {status}")
    cancelled = len(groups.get(str(JobStatus.CANCELLED), []))
    hint = _hint(action, include_cancelled, cancelled, include_flag)
    unique = len(dict.fromkeys(ids))
    return f"{len(left)} of {unique} job(s) not {PAST[action]}: {'; '.join(parts)} ({hint})"


def not_running(ids: Sequence[int], found: Mapping[int, str]) -> str:
    """Why named jobs could not be stopped: unknown, or in which status."""
    parts = [
        f"job {i} {'does not exist' if i not in found else f'is {found[i]}, not processing'}"
        for i in ids[:SHOWN_IDS]
    ]
    more = f" (and {len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else ""
    return "not stopped: " + "; ".join(parts) + more
