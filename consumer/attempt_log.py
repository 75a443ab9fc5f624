"""One INFO line per finished attempt: what an operator greps the journal for.

    job 42 fetch_page attempt 1 completed in 1.84 s  job=42 kind=fetch_page host=h1 ...

``outcome`` is what happens to the job next: ``completed``; ``retry`` (a failure with attempts
left: the job goes back to pending after its backoff); ``failed`` (for good); ``released``
(the host's fault, not the job's: back to pending without using an attempt); ``blocked`` (the
site refused us: back to pending without using an attempt, a bounded number of times).
"""

from __future__ import annotations

import logging

from scrapefleet.common.logging_setup import fields
from scrapefleet.common.store import ClaimedJob

log = logging.getLogger("scrapefleet.consumer.jobs")


def attempt_outcome(status: str, retried: bool) -> str:
    return "retry" if status == "failed" and retried else status


def log_attempt(job: ClaimedJob, host: str, status: str, retried: bool, duration_s: float) -> None:
    outcome = attempt_outcome(status, retried)
    level = logging.INFO if outcome in ("completed", "retry") else logging.WARNING
    log.log(
        level,
        "job %d %s attempt %d %s in %.2f s",
        job.id,
        job.kind,
        job.attempt,
        outcome,
        duration_s,
        extra=fields(
            job=job.id,
            kind=job.kind,
            host=host,
            attempt=job.attempt,
            outcome=outcome,
            duration_s=round(duration_s, 3),
        ),
    )
