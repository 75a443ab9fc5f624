"""Writes the outcomes of finished job attempts to the database, from one thread.

Worker threads hand their outcome over and are free at once; the claiming thread writes the
completions of its light jobs itself (``record_here``) and hands over only what it cannot write.
The recorder writes whatever has piled up in ONE transaction (the completions in one
conditional UPDATE, each failure in its own, one commit for all): at a thousand noop jobs a
second the commit, not the UPDATE, is what costs. After it, ``after_write`` (the
daemon may claim again: a slot counts as free only once its outcome is in the database, so the
database never shows more jobs processing on a host than its capacity).

A job that ran must not lose its result to a dropped connection: a batch that could not be
written is retried with backoff until it is, or until ``give_up()`` says the shutdown deadline
has passed (those jobs stay 'processing' and the next start of this consumer recovers them).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store, tracing_jobs
from scrapefleet.common.actions.error_classes import ErrorClass, next_try_at
from scrapefleet.common.actions.retry import retry_at
from scrapefleet.common.clock import utcnow
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.db.executes import Executes
from scrapefleet.common.error_lines import first_line, last_line
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.identities.proxy_pools import LeaseOutcome
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.runner import Outcome

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.1  # first wait after a failed write; doubles
RETRY_MAX_S = 5.0
MAX_BATCH = 500  # outcomes per transaction


@dataclass(frozen=True)
class Finished:
    job: ClaimedJob
    outcome: Outcome


def _one_statement(items: list[Finished]) -> bool:
    """Completions alone, none spawning children nor under a proxy or a profile (whose
    success is recorded for it: its back-off forgotten, its session's jar kept): one
    statement writes them all."""
    return all(
        i.outcome.status == "completed"
        and not i.outcome.spawn
        and i.job.proxy_id is None
        and i.job.profile is None
        for i in items
    )


class OutcomeRecorder:
    def __init__(
        self,
        engine: Engine,
        host: str,
        settings: Settings,
        *,
        statements: Executes,
        after_write: Callable[[], None],
        give_up: Callable[[], bool],
        written: Callable[[list[ClaimedJob]], None] | None = None,
    ) -> None:
        self.engine = engine
        self._statements = statements  # the held connection for a batch that is one statement
        self.host = host
        self.settings = settings
        self._after_write = after_write
        self._written = written  # told which attempts' outcomes a batch wrote (or gave up on)
        self._give_up = give_up
        self._queue: queue.Queue[list[Finished] | None] = queue.Queue()
        self._outstanding = 0  # submitted and not yet written (or given up on)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def outstanding(self) -> int:
        with self._lock:
            return self._outstanding

    def start(self, threads: SideThreads) -> None:
        """Its thread, started and watched by ``threads``."""
        self._thread = threads.start(f"recorder-{self.host}", self._run)

    def submit(self, job: ClaimedJob, outcome: Outcome) -> None:
        self.submit_many([(job, outcome)])

    def submit_many(self, finished: list[tuple[ClaimedJob, Outcome]]) -> None:
        """Several outcomes in one hand-off (the thread is woken once)."""
        with self._lock:
            self._outstanding += len(finished)
        self._queue.put([Finished(job, outcome) for job, outcome in finished])

    def record_here(self, finished: list[tuple[ClaimedJob, Outcome]]) -> bool:
        """Completions written in the caller's thread, one statement, sparing the hand-off to
        this recorder's thread; True if they were. Anything else (a failure to record, a spawn)
        and any error goes to the thread as ``submit_many`` would, with its retries."""
        items = [Finished(job, outcome) for job, outcome in finished]
        if not _one_statement(items):
            self.submit_many(finished)
            return False
        try:
            self._write_completions(self._statements, items)
        except Exception as exc:
            log.info("writing %d completion(s) in place failed (%s); handed over", len(items), exc)
            self.submit_many(finished)
            return False
        return True

    def close(self, timeout_s: float) -> None:
        """Write what is queued (bounded by give_up), then stop the thread."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        closing = False
        while not closing:
            first = self._queue.get()
            batch: list[Finished] = []
            if first is None:
                closing = True
            else:
                batch += first
            while len(batch) < MAX_BATCH:
                try:
                    items = self._queue.get_nowait()
                except queue.Empty:
                    break
                if items is None:
                    closing = True
                else:
                    batch += items
            if batch:
                self._write_until_done(batch)
                with self._lock:
                    self._outstanding -= len(batch)
                if self._written is not None:
                    self._written([item.job for item in batch])
                self._after_write()

    def _write_until_done(self, batch: list[Finished]) -> None:
        wait_s = RETRY_FIRST_S
        while True:
            try:
                if _one_statement(batch):  # no transaction around it needed
                    self._write_completions(self._statements, batch)
                else:
                    with transaction(self.engine) as conn:
                        self._write_batch(conn, batch)
                return
            except DatabaseUnavailable as exc:
                if self._give_up():
                    log.error(
                        "could not record the outcome of job(s) %s before the shutdown deadline"
                        " (%s); they stay processing and are recovered at the next start",
                        _ids(batch),
                        exc,
                    )
                    return
                log.warning(
                    "recording %d job outcome(s) failed (%s); retrying in %.1f s",
                    len(batch),
                    exc,
                    wait_s,
                )
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, RETRY_MAX_S)
            except Exception as exc:
                # Not the connection: something in one row. Isolate it so the others are kept.
                log.warning("recording a batch failed (%s); writing one by one", first_line(exc))
                self._write_one_by_one(batch)
                return

    def _write_one_by_one(self, batch: list[Finished]) -> None:
        for item in batch:
            try:
                with transaction(self.engine) as conn:
                    self._write(conn, item)
            except Exception:
                log.exception("the outcome of job %d could not be recorded", item.job.id)

    def _write_batch(self, conn: Connection, batch: list[Finished]) -> None:
        """Completions in one statement (the hot path); failures and releases one by one."""
        completed = [i for i in batch if i.outcome.status == "completed"]
        for item in completed:
            _charge(conn, item.job, LeaseOutcome.OK)
            _keep_session(conn, item.job, item.outcome)
        self._write_completions(conn, completed)
        for item in batch:
            if item.outcome.status != "completed":
                self._write(conn, item)

    @tracing_jobs.result_write
    def _write_completions(self, conn: Executes, completed: list[Finished]) -> None:
        if not completed:
            return
        moved = set(
            store.complete_jobs(
                conn,
                self.host,
                [(i.job.id, i.job.claim, i.outcome.result or {}) for i in completed],
                {i.job.id: _spawn_entries(i.outcome) for i in completed if i.outcome.spawn},
            )
        )
        for item in completed:
            if item.job.id not in moved:
                log.warning("job %d claim %d is no longer ours: result dropped", *_key(item.job))

    @tracing_jobs.result_write
    def _write(self, conn: Connection, item: Finished) -> None:
        job, outcome = item.job, item.outcome
        if outcome.status == "completed":
            assert outcome.result is not None
            _charge(conn, job, LeaseOutcome.OK)
            _keep_session(conn, job, outcome)
            spawn = _spawn_entries(outcome)
            if not store.complete_job(conn, self.host, job.id, job.claim, outcome.result, spawn):
                log.warning("job %d claim %d is no longer ours: result dropped", *_key(job))
            return
        if outcome.status == "released":
            store.release_job(
                conn,
                self.host,
                job.id,
                job.claim,
                outcome.error or "released",
                by_page=outcome.by_page,
            )
            # The attempt's line (attempt_log) already says it, with its reason.
            log.debug("job %d attempt %d released: %s", job.id, job.attempt, outcome.error)
            return
        if outcome.status == "blocked":
            self._write_blocked(conn, job, outcome)
            return
        when = None
        error_class = outcome.error_class or ErrorClass.TRANSIENT
        if outcome.retryable:
            now = utcnow()
            when = next_try_at(
                error_class,
                backoff_at=retry_at(
                    job.attempt,
                    job.max_attempts,
                    now,
                    base_s=self.settings.backoff_base_s,
                    max_s=self.settings.backoff_max_s,
                ),
                now=now,
                retry_after_s=outcome.retry_after_s,
                retry_after_max_s=self.settings.retry_after_max_s,
            )
        error = outcome.error or "failed"
        if outcome.proxy_error:
            _charge(conn, job, LeaseOutcome.ERROR)
        status = store.fail_attempt(
            conn,
            self.host,
            job.id,
            job.claim,
            error,
            retry_at=when,
            artifacts=outcome.artifacts,
            error_class=error_class,
            linger_s=self.settings.lock_linger_s if outcome.still_running else None,
        )
        # The attempt's line (attempt_log) says it at INFO or WARNING; this one adds the retry time.
        log.debug(
            "job %d attempt %d/%d failed (%s): %s",
            job.id,
            job.attempt,
            job.max_attempts,
            last_line(error) or error,
            f"retry at {when:%H:%M:%S.%f}" if status == "pending" and when else status,
        )

    def _write_blocked(self, conn: Connection, job: ClaimedJob, outcome: Outcome) -> None:
        """Back to pending without using an attempt (failed past max_blocks_per_job); the
        job's profile cools down."""
        reason = outcome.reason or "blocked"
        status = store.release_blocked(
            conn,
            self.host,
            job.id,
            job.claim,
            reason,
            max_blocks=self.settings.max_blocks_per_job,
            profile_cooldown_s=self.settings.profile_block_cooldown_s,
            profile_max_cooldown_s=self.settings.profile_block_max_cooldown_s,
            error=outcome.error,
            artifacts=outcome.artifacts,
        )
        log.warning(
            "job %d attempt %d blocked on %s (%s): %s",
            job.id,
            job.attempt,
            self.host,
            reason,
            "no longer ours" if status is None else status,
        )


def _charge(conn: Connection, job: ClaimedJob, outcome: LeaseOutcome) -> None:
    """How the attempt ended for the proxy (or profile) it leased: before the statement that
    moves the job on, which the charge reads as still processing. (A block is charged by
    store.release_blocked itself.)"""
    if job.proxy_id is not None or job.profile is not None:
        store.charge_identity(conn, job.id, job.claim, outcome)
    if job.profile is not None and outcome is LeaseOutcome.OK:
        store.profile_succeeded(conn, job.id)


def _keep_session(conn: Connection, job: ClaimedJob, outcome: Outcome) -> None:
    """A completed job of a sticky session leaves its jar with the session, for the next."""
    if outcome.session_kept is not None:
        store.keep_session(conn, job.id, job.claim, *outcome.session_kept)


def _spawn_entries(outcome: Outcome) -> list[dict[str, Any]]:
    return [child.as_json() for child in outcome.spawn]


def _key(job: ClaimedJob) -> tuple[int, int]:
    return job.key


def _ids(batch: list[Finished]) -> list[int]:
    return [item.job.id for item in batch]
