"""How a running consumer claims and runs its jobs: the claim (under the free slots, the stack's
budgets and the poll schedule), light jobs in the claiming thread, the others in the pool, and
their outcomes handed to the recorder. Claimer is the main thread's; its ``work`` runs in the
job threads, which touch nothing of it but what has a lock of its own (the in-flight attempts,
the recorder, the wakeup).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

from sqlalchemy.engine import Engine

from scrapefleet.common import store, tracing_jobs
from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.errors import UnknownAction
from scrapefleet.common.http.request_cancel import RequestCanceller, cancellable
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime import metrics
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.attempt_endings import AttemptEndings
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.attempt_log import log_attempt
from scrapefleet.consumer.browser.actions.block_detection import BlockRules
from scrapefleet.consumer.browser.actions.job_setup import host_defaults
from scrapefleet.consumer.browser.sessions.profile_sessions import (
    job_proxy,
    profile_lease,
    profiles_root,
)
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.runner import DriverLease, Outcome, leases_from, run_job
from scrapefleet.consumer.running_state import NOT_CLAIMING_STATES, Clock, HostStateView, Wakeup

# One logger for every part of the running consumer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.consumer.serving")

# A light job (common.actions.registry) that took longer than this held up the claiming thread.
LIGHT_SLOW_S = 0.1


def _is_light(job: ClaimedJob) -> bool:
    """Whether ``job`` runs in the claiming thread (common.actions.registry, ``light``)."""
    if job.needs_browser:
        return False
    try:
        action = get_action(job.kind)
    except UnknownAction:  # a worker thread reports it, as for any job
        return False
    return action.is_light(job.payload)


def time_limit_s(job: ClaimedJob, host_default_s: float) -> float:
    """How long one attempt of ``job`` may run: its action's ``timeout_s``, else the host's
    ``job_timeout_s`` (an unknown kind fails at once in its worker: the host's)."""
    try:
        return get_action(job.kind).time_limit_s(host_default_s)
    except UnknownAction:
        return host_default_s


def _built_in(kind: str) -> bool:
    """A built-in action (noop, ...): its lightness is ours and tested never to wait, so a
    light job of it that took long says the host was starved, not that the action waits."""
    return get_action(kind).func.__module__.startswith("scrapefleet.")


class Claimer:
    def __init__(
        self,
        config: ConsumerConfig,
        engine: Engine,
        capacity: int,
        *,
        attempts: InFlightAttempts,
        recorder: OutcomeRecorder,
        endings: AttemptEndings,
        supervisor: StackSupervisor | None,
        statements: StatementConnection,
        executor: Executor,
        host_state: HostStateView,
        lease: AttemptLease,
        wakeup: Wakeup,
        publish: Callable[[], None],
        after_write: Callable[[], None],
        clock: Clock = time.monotonic,
    ) -> None:
        self.config = config
        self.settings = config.settings
        self.host = config.host
        self.engine = engine
        self.capacity = capacity  # the host row's, not the setting's
        self.attempts = attempts
        self.recorder = recorder
        self._endings = endings
        self.supervisor = supervisor
        self._statements = statements
        self.executor = executor  # the job threads
        self._host_state = host_state
        self._lease = lease
        self._wakeup = wakeup
        self._publish_status = publish
        self._on_outcomes_written = after_write  # outcomes written here, for light jobs
        self._clock = clock
        self._block_rules = BlockRules.from_settings(config.settings)  # once, not per job
        self._slow_light_kinds: set[str] = set()  # warned about (_run_light)

    def claim_on_schedule(self) -> tuple[int, float]:
        """Claim if the poll schedule says so; the jobs claimed and the seconds until its next
        claim."""
        return self._wakeup.on_schedule(self.claim)

    def claim(self) -> int:
        if self._host_state.value in NOT_CLAIMING_STATES or self._lease.lapsed(self._clock()):
            return 0
        # An outcome not yet written keeps its job 'processing' in the database: its slot is
        # not free yet, or the database would count more than capacity on this host.
        room = self.attempts.room(self.capacity, self.recorder.outstanding)
        if room is None:
            return 0
        free = room.free
        # Browser jobs only where a browser can run them: this host's stack (under its
        # restart and reboot budgets), or a driver factory the caller gave.
        browser_free = free if self.config.driver_factory is not None else 0
        if self.supervisor is not None:
            free, browser_free = self.supervisor.claim_budget(
                free, room.since_restart, room.since_boot, room.browser_busy
            )
            if free <= 0:
                return 0
        began_ns = time.time_ns()
        claim = store.claim_jobs(
            self._statements, self.host, free, browser_free, running_here=room.running_here
        )
        tracing_jobs.claimed(claim.jobs, self.host, began_ns)
        in_flight = self.attempts.claimed(
            claim.jobs,
            self._clock(),
            self._time_limit_s,
            since_restart=claim.jobs_since_restart,
            since_boot=claim.jobs_since_boot,
            more=claim.more,
        )
        # A claim without browser jobs changes none of the stack's budgets: not told.
        if self.supervisor is not None and any(job.needs_browser for job in claim.jobs):
            # May start the stack (first browser job), seconds in this thread: the jobs wait.
            self.supervisor.after_claim(
                claim.jobs, in_flight, claim.jobs_since_restart, claim.jobs_since_boot
            )
            # A job's time runs from when it can run: not while the stack was starting.
            self.attempts.restamp(claim.jobs, self._clock())
        light: list[ClaimedJob] = []
        for job in claim.jobs:  # the others started first: they run beside the light ones
            if _is_light(job):
                light.append(job)
            else:
                self.executor.submit(self.work, job)
        if light:
            self._run_light(light)
        return len(claim.jobs)

    def maintain(self) -> None:
        """Let the supervisor restart or reboot once nothing runs here (stuck threads aside)."""
        if self.supervisor is None:
            return
        busy, browser_busy = self.attempts.busy_and_browser()
        self.supervisor.step(busy, self.recorder.outstanding, browser_busy)

    def looks_idle(self) -> bool:
        if self.attempts.busy:
            return False
        if self.recorder.outstanding:
            return False
        with transaction(self.engine) as conn:
            return queries.host_is_idle(conn, self.host)

    def _time_limit_s(self, job: ClaimedJob) -> float:
        return time_limit_s(job, self.settings.job_timeout_s)

    # -- jobs -----------------------------------------------------------------------

    def work(self, job: ClaimedJob) -> None:
        """In a pool thread."""
        self._hand_over([(job, self._attempt(job))])

    def _run_light(self, jobs: list[ClaimedJob]) -> None:
        """In the claiming thread, one after the other: jobs of light actions
        (common.actions.registry), their completions written together from this thread."""
        finished = []
        for job in jobs:
            started = self._clock()
            finished.append((job, self._attempt(job)))
            took_s = self._clock() - started
            if (
                took_s > LIGHT_SLOW_S
                and job.kind not in self._slow_light_kinds
                and not _built_in(job.kind)
            ):
                self._slow_light_kinds.add(job.kind)  # once per kind: it is the action's doing
                log.warning(
                    "job %d of light kind %r took %.2f s in the claiming thread, which claimed"
                    " nothing meanwhile; an action that waits must not be light",
                    job.id,
                    job.kind,
                    took_s,
                )
        self._hand_over(finished, here=True)  # no thread woken for them

    def _attempt(self, job: ClaimedJob) -> Outcome:
        canceller = RequestCanceller()
        self.attempts.add_canceller(job.key, canceller)
        try:
            with cancellable(canceller), tracing_jobs.running(job, self.host) as run:
                return run.ended(self._run_attempt(job))
        finally:
            self.attempts.drop_canceller(job.key)

    def _run_attempt(self, job: ClaimedJob) -> Outcome:
        lease: DriverLease | None = None
        if self.supervisor is not None:
            lease = functools.partial(self.supervisor.lease, job.id)
            if job.profile:  # a browser of its own on the profile's directory
                root = profiles_root(self.config.settings)
                proxy = job_proxy(job, self.config.settings)
                settings = self.config.settings  # the agent's when there is one
                owner, agent = settings.browser_user, settings.browser_agent_socket
                lease = profile_lease(lease, root, job.profile, proxy, owner, agent)
        elif self.config.driver_factory is not None:
            lease = leases_from(self.config.driver_factory)
        started = self._clock()
        outcome = run_job(
            job,
            lease=lease,
            capture_failure=self.config.capture_failure,
            browser_defaults=host_defaults(self.config.settings),
            block_rules=self._block_rules,
            host_starved=self._host_starved,
            result_max_bytes=self.config.settings.result_max_bytes,
            artifacts_dir=self.config.settings.artifacts_dir,
        )
        # Duration by kind and outcome; a retryable failure with attempts left is a retry (the
        # recorder schedules it).
        retried = (
            outcome.status == "failed" and outcome.retryable and job.attempt < job.max_attempts
        )
        duration_s = self._clock() - started
        metrics.observe_job(job.kind, outcome.status, duration_s, retried=retried)
        log_attempt(job, self.host, outcome.status, retried, duration_s, outcome.error)
        # A job without a browser changes nothing of the stack's state: not told.
        if self.supervisor is not None and job.needs_browser:
            released = outcome.status == "released"
            self.supervisor.job_returned(
                job.id, job.needs_browser, released=released, slow=outcome.slow
            )
        return outcome

    def _host_starved(self) -> str | None:
        return self.supervisor.starved() if self.supervisor is not None else None

    def _hand_over(self, finished: list[tuple[ClaimedJob, Outcome]], *, here: bool = False) -> None:
        """Outcomes to the recorder (``here``: written in this thread if it can), but for
        attempts given up meanwhile (timed out, stopped, rescued): those are dropped, their
        slots free again."""
        outcomes = {job.key: outcome for job, outcome in finished}
        still_ours, given_up = self.attempts.returned(job for job, _ in finished)
        ours = [(job, outcomes[job.key]) for job in still_ours]
        if ours and not here:
            self.recorder.submit_many(ours)
        elif ours and self.recorder.record_here(ours):
            self._on_outcomes_written()
        for job in given_up:
            log.warning(
                "job %d claim %d returned after it was given up (timeout, stop, rescue or cold"
                " stop); outcome (%s) dropped",
                job.id,
                job.claim,
                outcomes[job.key].status,
            )
        if given_up:
            self._endings.confirm_ended()  # its lock key is free again
            self._publish_status()  # the stuck threads' slots are free again
            self._wakeup.claim_soon()
