"""How a running consumer gives attempts up: timeouts, attempts stopped or rescued elsewhere, a
lapsed lease; and what it then owes the database (a release, the confirmation that a given-up
attempt's thread has returned). The bookkeeping is consumer.in_flight's; AttemptEndings does the
I/O around it: the failure recorded, the attempt's requests and browser ended, the statements.
The main thread, the heartbeat and the recorder's thread call it; it holds no state of its own
beyond what it is given (the in-flight attempts and the lease have their own locks).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.common.store.consuming.attempts import AttemptKey
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.runner import Outcome
from scrapefleet.consumer.running_state import Clock

# One logger for every part of the running consumer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.consumer.serving")


Record = Callable[[ClaimedJob, Outcome], None]  # an outcome to the recorder


class AttemptEndings:
    def __init__(
        self,
        engine: Engine,
        host: str,
        settings: Settings,
        attempts: InFlightAttempts,
        lease: AttemptLease,
        supervisor: StackSupervisor | None,
        publish: Callable[[], None],
        clock: Clock = time.monotonic,
    ) -> None:
        self.engine = engine
        self.host = host
        self.settings = settings
        self.attempts = attempts
        self.lease = lease
        self.supervisor = supervisor
        self._publish_status = publish  # the status document, rewritten
        self._clock = clock

    def expire_timed_out(self, record: Record) -> None:
        """Attempts past their time limit: a failure recorded for each, their thread made to
        return."""
        expired = self.attempts.expire(self._clock())
        if expired:
            self._publish_status()  # stuck threads: busy slots the database no longer counts
        for running in expired:
            job, limit = running.job, running.limit_s
            log.warning("job %d attempt %d timed out after %g s", job.id, job.attempt, limit)
            which = (
                "its action's timeout_s"
                if limit != self.settings.job_timeout_s
                else "job_timeout_s"
            )
            timeout = Outcome.failed(f"TimeoutError: job exceeded {which} ({limit:g} s)")
            record(job, replace(timeout, still_running=True))
            self.end_attempt(job)

    def give_up(self, attempts: frozenset[AttemptKey]) -> None:
        """Attempts no longer ours in the database (an operator stopped them, or the producer
        rescued them from a host it thought dead): end them here. Their browser session is
        ended so that their thread returns; their outcome is dropped."""
        gone = self.attempts.give_up(attempts)
        if gone:
            self._publish_status()
        for running in gone:
            job = running.job
            log.warning(
                "job %d attempt %d (claim %d) is no longer this host's (stopped or rescued):"
                " ending it",
                job.id,
                job.attempt,
                job.claim,
                extra=fields(job=job.id, kind=job.kind, host=self.host, attempt=job.attempt),
            )
            self.end_attempt(job)

    def end_attempt(self, job: ClaimedJob) -> None:
        """Make a given-up attempt's thread return: its HTTP requests are closed, its browser
        is killed."""
        canceller = self.attempts.canceller(job.key)
        if canceller is not None:
            canceller.cancel()
        if self.supervisor is not None:
            self.supervisor.abandon(job.id, job.needs_browser)

    def confirm_ended(self) -> None:
        """Tell the database which given-up attempts have ended here (their lock keys are free
        again); kept for the next heartbeat if it cannot be told now. An attempt whose release
        is still owed (fenced) waits for it: a confirmation before the release that records
        its lingering would leave its lock key held."""
        ended = self.attempts.take_ended()
        if not ended:
            return
        try:
            with transaction(self.engine) as conn:
                store.attempts_ended(conn, self.host, ended)
        except Exception as exc:
            log.warning("could not confirm ended attempts %s: %s", ended, first_line(exc))
            self.attempts.put_back_ended(ended)

    def on_attempts_written(self, jobs: list[ClaimedJob]) -> None:
        """In the recorder's thread: these attempts' outcomes are in the database now; a
        timed-out one whose thread already returned can have its end confirmed."""
        if self.attempts.outcomes_written(jobs):
            self.confirm_ended()

    def fence_if_lapsed(self) -> None:
        """No heartbeat reached the database for too long (consumer.attempt_lease): the
        producer may be about to hand these attempts on. End them here, claim nothing, and
        release them once the database answers (unless it rescued them meanwhile)."""
        now = self._clock()
        if not self.lease.lapsed(now):
            return
        lost = self.attempts.fence_all()
        if not lost:
            return
        log.warning(
            "no heartbeat reached the database for %.1f s: ending %d attempt(s) (job(s) %s)"
            " before the producer hands them on",
            self.lease.silent_s(now),
            len(lost),
            sorted(job.id for job in lost),
        )
        self._publish_status()
        for job in lost:
            self.end_attempt(job)

    def release_fenced(self) -> None:
        """The attempts the lapsed lease ended go back to pending (each only while still this
        host's by its claim), lingering while their threads run."""
        owed, running = self.attempts.fenced()
        if not owed:
            return
        reason = f"released: consumer on {self.host} lost the database"
        linger_s = self.settings.lock_linger_s
        try:
            with transaction(self.engine) as conn:
                for key, job in owed.items():
                    linger = linger_s if key in running else None
                    store.release_job(conn, self.host, job.id, job.claim, reason, linger_s=linger)
        except Exception as exc:
            log.warning("could not release attempts %s yet: %s", sorted(owed), first_line(exc))
            return
        self.attempts.released(owed)

    def until_next_timeout(self) -> float:
        soonest = self.attempts.soonest_deadline()
        if soonest == math.inf:
            return math.inf
        return max(0.01, soonest - self._clock())
