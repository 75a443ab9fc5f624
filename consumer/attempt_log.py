"""One line per finished attempt, with its fields and its reason: what an operator greps the
journal for.

    job 42 fetch_page attempt 1 completed in 1.84 s  job=42 kind=fetch_page host=h1 ...
    job 43 fetch_page attempt 2 failed in 30.02 s, to be retried  job=43 ... reason="..."

The time is the attempt's own, never the back-off: "retry in 0.17 s" read as the wait before
the next try. When the retry is due is the recorder's (DEBUG) line and the job's ``not_before``.

Levels: INFO for what the fleet handles by itself (completed, a retry, a release); WARNING for a
job failed for good and for a site that blocked us (worth a look). The recorder's own lines about
the same attempt (its retry time, the write) are DEBUG, so an attempt is one line at INFO.

``outcome`` is what happens to the job next: ``completed``; ``retry`` (a failure with attempts
left: the job goes back to pending after its backoff); ``failed`` (for good); ``released``
(the host's fault, not the job's: back to pending without using an attempt); ``blocked`` (the
site refused us: back to pending without using an attempt, a bounded number of times).
"""

from __future__ import annotations

import logging

from scrapefleet.common.error_lines import last_line
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.store import ClaimedJob

# A reason is the last line of a traceback or a release's message; a page can put anything in an
# exception's text, so the line is bounded.
REASON_MAX_CHARS = 300

log = logging.getLogger("scrapefleet.consumer.jobs")


def attempt_outcome(status: str, retried: bool) -> str:
    return "retry" if status == "failed" and retried else status


def attempt_reason(error: str | None) -> str | None:
    """The error's last non-blank line, bounded: what went wrong, in one line."""
    line = last_line(error)
    if not line:
        return None
    return line if len(line) <= REASON_MAX_CHARS else line[: REASON_MAX_CHARS - 3] + "..."


# How each outcome reads before the attempt's duration.
OUTCOME_WORDS = {
    "completed": "completed in %.2f s",
    "retry": "failed in %.2f s, to be retried",
    "failed": "failed for good in %.2f s",
    "released": "released in %.2f s",
    "blocked": "blocked in %.2f s",
}


def attempt_level(outcome: str) -> int:
    return logging.WARNING if outcome in ("failed", "blocked") else logging.INFO


def log_attempt(
    job: ClaimedJob,
    host: str,
    status: str,
    retried: bool,
    duration_s: float,
    error: str | None = None,
) -> None:
    outcome = attempt_outcome(status, retried)
    reason = attempt_reason(error) if status != "completed" else None
    extra = fields(
        job=job.id,
        kind=job.kind,
        host=host,
        attempt=job.attempt,
        outcome=outcome,
        duration_s=round(duration_s, 3),
        **({"reason": reason} if reason else {}),
    )
    log.log(
        attempt_level(outcome),
        "job %d %s attempt %d " + OUTCOME_WORDS.get(outcome, outcome + " in %.2f s"),
        job.id,
        job.kind,
        job.attempt,
        duration_s,
        extra=extra,
    )
