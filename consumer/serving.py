"""The running part of one consumer: its loops, threads and in-flight jobs (see consumer.daemon
for the threads and how it stops)."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import get_action, load_user_actions
from scrapefleet.common.db.channels import assigned_channel
from scrapefleet.common.db.engines import Listener, describe, sqlalchemy_url, transaction
from scrapefleet.common.db.pooler import listen_url
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.errors import DatabaseUnavailable, ScrapefleetError, UnknownAction
from scrapefleet.common.http.request_cancel import RequestCanceller, cancellable
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.lifecycle import DaemonState, Lifecycle
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.status.document import HOST_STATES, BrowserState
from scrapefleet.common.store import ClaimedJob, Registration
from scrapefleet.common.store.attempts import AttemptKey
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.attempt_log import log_attempt
from scrapefleet.consumer.browser.artifact_janitor import ArtifactJanitor
from scrapefleet.consumer.browser.block_detection import BlockRules
from scrapefleet.consumer.browser.job_setup import host_defaults
from scrapefleet.consumer.browser.profile_sessions import job_proxy, profile_lease, profiles_root
from scrapefleet.consumer.browser.stack_supervisor import StackSupervisor
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.poll_schedule import PollSchedule
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.runner import DriverLease, Outcome, leases_from, run_job
from scrapefleet.consumer.status_writer import Snapshot, StatusReporter, read_boot_id

log = logging.getLogger(__name__)

# Reason under which a stopping consumer drains its own host; a restart recognises it (an
# operator's drain has another reason and is kept).
OWN_DRAIN_REASON = "consumer stopping"
NOT_CLAIMING_STATES = (HostState.DRAINING, HostState.DISABLED)
DB_RETRY_MAX_S = 10.0  # longest wait between attempts while the database is unreachable
DRAIN_CHECK_S = 0.05  # drain loop period while in-flight jobs finish
IDLE_POLLS_TO_EXIT = 2  # run(until_idle=True): idle for this many polls -> exit
# A cold stop still gives the outcomes already in hand this long to reach the database: a job
# that did finish is worth a moment, a rerun costs more.
COLD_WRITE_GRACE_S = 2.0
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


@dataclass(frozen=True)
class InFlight:
    job: ClaimedJob
    started: float  # time.monotonic()
    limit_s: float  # its attempt's time limit (time_limit_s)

    @property
    def deadline(self) -> float:
        return self.started + self.limit_s


def _built_in(kind: str) -> bool:
    """A built-in action (noop, ...): its lightness is ours and tested never to wait, so a
    light job of it that took long says the host was starved, not that the action waits."""
    return get_action(kind).func.__module__.startswith("scrapefleet.")


class RunningConsumer:
    """The running part of one consumer, built by ``open`` once its host is registered."""

    @classmethod
    def open(cls, config: ConsumerConfig, engine: Engine, lifecycle: Lifecycle) -> RunningConsumer:
        load_user_actions(config.settings.actions)
        boot_id = read_boot_id(config.settings.boot_id_file)
        with transaction(engine) as conn:
            store.reactivate_after_own_drain(conn, config.host, OWN_DRAIN_REASON)
            registration = store.register_consumer(
                conn, config.host, config.settings.capacity, boot_id
            )
            recovered = store.recover_host_jobs(conn, config.host)
            # Whatever an earlier process of this host was still running has ended with it.
            store.attempts_ended(conn, config.host, None)
            running = cls(config, engine, lifecycle, registration, boot_id)
            # The host turns active when this transaction commits: its status document is
            # fresh before that, so the producer never probes an active host and finds the
            # document of its last run (a stale one is a failed probe: a false offline).
            running._publish_status()
        running._start_threads()
        log.info(
            "consumer %s started: capacity %d, state %s, %d interrupted job(s) recovered",
            config.host,
            running.capacity,
            registration.state,
            len(recovered),
        )
        return running

    def __init__(
        self,
        config: ConsumerConfig,
        engine: Engine,
        lifecycle: Lifecycle,
        registration: Registration,
        boot_id: str,
    ) -> None:
        settings = config.settings
        self.config = config
        self.settings = settings
        self._block_rules = BlockRules.from_settings(settings)  # compiled once, not per job
        self.engine = engine
        self.host = config.host
        self.lifecycle = lifecycle
        self.capacity = registration.capacity  # the host row's, not the setting's
        self._wake = threading.Event()
        self._closed = threading.Event()  # set last: the heartbeat stops
        self._lock = threading.Lock()  # guards the fields below
        # By attempt, (job id, claim): an attempt given up and claimed again is another entry.
        self._in_flight: dict[AttemptKey, InFlight] = {}
        # Attempts given up here (timed out, rescued, stopped, let go) whose threads still run:
        # their slots stay taken, their jobs are not claimed again here until they return.
        self._given_up: dict[AttemptKey, ClaimedJob] = {}
        # Given-up attempts whose threads returned, not yet confirmed to the database.
        self._ended: set[AttemptKey] = set()
        self._cancellers: dict[AttemptKey, RequestCanceller] = {}  # of attempts running now
        # Attempts ended here because no heartbeat reached the database for too long (the
        # lease lapsed), still the database's to release once it answers again.
        self._fenced: dict[AttemptKey, ClaimedJob] = {}
        # Timed-out attempts whose failure (which makes their lock key linger) the recorder
        # has not written yet: their end is confirmed only after it.
        self._linger_owed: set[AttemptKey] = set()
        self._lease = AttemptLease.for_rescue_after(settings.rescue_after_s, time.monotonic())
        self._more_queued = False  # jobs were left queued: claim again when a slot frees
        # Without a LISTEN connection, claims follow a schedule (consumer.poll_schedule).
        polling = listen_url(settings, engine.url) is None
        self._poll = PollSchedule(settings.consumer_poll_s) if polling else None
        self._db_state = registration.state
        self._published: tuple[object, ...] | None = None  # what _publish_if_changed last saw
        self._since_restart = registration.jobs_since_restart
        self._since_boot = registration.jobs_since_boot
        self._threads: list[threading.Thread] = []
        self._slow_light_kinds: set[str] = set()  # warned about (_run_light)
        self.reporter = StatusReporter(settings.state_dir, self.host, boot_id)
        self.executor = ThreadPoolExecutor(self.capacity, thread_name_prefix=f"job-{self.host}")
        self.supervisor: StackSupervisor | None = None
        if config.owns_browser_stack:
            self.supervisor = StackSupervisor(
                settings,
                engine,
                self.host,
                self.capacity,
                on_host_state=self._set_own_state,
                on_stack_counter=self._set_since_restart,
            )
        # The claims and the batches of completions, each one statement, hundreds a second at
        # full load: on a connection held open rather than through the engine's pool.
        self._statements = StatementConnection(
            engine.url, settings, application_name=f"scrapefleet-consumer {self.host}"
        )
        self.recorder = OutcomeRecorder(
            engine,
            self.host,
            settings,
            statements=self._statements,
            after_write=self._on_outcomes_written,
            give_up=lambda: lifecycle.cold,
            written=self._on_attempts_written,
        )
        self.janitor = ArtifactJanitor(settings, lifecycle.stop_event)
        lifecycle.on_change(self._on_lifecycle_change)

    def _start_threads(self) -> None:
        if self.supervisor is not None:
            self.supervisor.clean_leftovers()
            metrics.track_browser_memory(self.host, self.supervisor.memory_pss_bytes)
            supervisor = self.supervisor
            metrics.track_browser_limit(self.host, lambda: supervisor.browser_limit()[0])
        self.janitor.start()
        self.recorder.start()
        loops = [(self._heartbeat_loop, "heartbeat")]
        if self._poll is None:
            loops.append((self._listen_loop, "listen"))
        else:  # polling by choice, or a transaction pooler (it never delivers a NOTIFY)
            log.info(
                "no LISTEN connection (consumer_wakeup=%s, database_pooler=%s): claims every %g s",
                self.settings.consumer_wakeup,
                self.settings.database_pooler,
                self.settings.consumer_poll_s,
            )
        for target, name in loops:
            thread = threading.Thread(target=target, name=f"{name}-{self.host}", daemon=True)
            thread.start()
            self._threads.append(thread)

    # -- what it reports ------------------------------------------------------------

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._in_flight) + len(self._given_up)

    @property
    def stuck(self) -> int:
        with self._lock:
            return len(self._given_up)

    @property
    def state(self) -> str:
        if self.lifecycle.state is DaemonState.STOPPED:
            return HostState.OFFLINE
        if self.lifecycle.stopping:
            return HostState.DRAINING
        # 'offline' in the database is the producer's verdict on reachability; this consumer is
        # alive and serving, which is what its own document says.
        if self._db_state == HostState.OFFLINE or self._db_state not in HOST_STATES:
            return HostState.ACTIVE
        if self.supervisor is not None and self._db_state not in NOT_CLAIMING_STATES:
            return self.supervisor.maintenance_state or self._db_state
        return self._db_state

    # -- serving and stopping -------------------------------------------------------

    def serve(self, until_idle: bool) -> None:
        try:
            if self.lifecycle.started():  # the document says so (_on_lifecycle_change)
                self._main_loop(until_idle)
            self.lifecycle.request_stop("idle" if until_idle else "stop requested")
            self._hand_back_queued()
            if not self.lifecycle.drain_until(self._drained, DRAIN_CHECK_S):
                self._let_go_of_in_flight()
        finally:
            self._finish()

    def _drained(self) -> bool:
        """In-flight jobs done (or timed out) and every outcome written."""
        self._expire_timed_out()
        with self._lock:
            busy = len(self._in_flight)
        return busy == 0 and self.recorder.outstanding == 0

    def _hand_back_queued(self) -> None:
        """Host to draining (unless an operator already chose its state), queued jobs back to
        pending for the other hosts. Retried while the database is away, until the stop turns
        cold."""
        wait_s = self.settings.consumer_poll_s
        while True:
            try:
                with transaction(self.engine) as conn:
                    store.set_host_state(
                        conn,
                        self.host,
                        HostState.DRAINING,
                        OWN_DRAIN_REASON,
                        expected=[HostState.ACTIVE],
                    )
                    handed = store.requeue_host_queued(
                        conn, self.host, f"requeued: consumer on {self.host} stopping"
                    )
                if handed:
                    log.info("handed %d queued job(s) back", len(handed))
                return
            except DatabaseUnavailable as exc:
                if self.lifecycle.cold:
                    log.warning("could not hand queued jobs back: %s", exc)
                    return
                log.warning("handing queued jobs back failed (%s); retrying", exc)
                if self.lifecycle.wait_cold(wait_s):
                    log.warning("could not hand queued jobs back before the cold stop")
                    return
                wait_s = min(wait_s * 2, DB_RETRY_MAX_S)

    def _let_go_of_in_flight(self) -> None:
        """Cold stop: the jobs still running are not waited for. They end as after a crash
        (store.recover_host_jobs: back to pending with the attempt counted, failed on the last
        one), now if the database answers, else at the next start or by the producer's rescue.
        Their threads are counted as stuck; what they return is dropped."""
        with self._lock:
            let_go = sorted(job_id for job_id, _ in self._in_flight)
            self._given_up.update((k, f.job) for k, f in self._in_flight.items())
            self._in_flight.clear()
        self.recorder.close(COLD_WRITE_GRACE_S)  # outcomes already in hand, if it can
        if not let_go and self.recorder.outstanding == 0:
            return
        try:
            with transaction(self.engine) as conn:
                ended = store.recover_host_jobs(conn, self.host)
        except Exception as exc:
            log.warning(
                "cold stop: job(s) %s left processing (%s); the next start of this consumer,"
                " or the producer's rescue, sends them back",
                let_go,
                describe(exc),
            )
            return
        log.warning(
            "cold stop: job(s) %s not waited for; %d interrupted attempt(s) ended as after a"
            " crash (back to pending, or failed on their last attempt)",
            let_go,
            len(ended),
        )

    def _finish(self) -> None:
        self.lifecycle.request_stop("stopped")  # the loop ended by an exception: still a stop
        cold = self.lifecycle.cold
        self.recorder.close(COLD_WRITE_GRACE_S if cold else self.lifecycle.drain_left_s() + 1)
        if self.supervisor is not None:
            self.supervisor.close()
        try:
            with transaction(self.engine) as conn:
                # Jobs assigned while we drained, then the host offline if we drained it (an
                # operator's drain stays, so that a restarted consumer does not take work).
                store.requeue_host_queued(
                    conn, self.host, f"requeued: consumer on {self.host} stopped"
                )
                store.offline_after_own_drain(
                    conn, self.host, OWN_DRAIN_REASON, f"consumer stopped: {self.lifecycle.reason}"
                )
        except Exception as exc:
            log.warning("could not mark host %s offline: %s", self.host, describe(exc))
        self.lifecycle.stopped()
        self._closed.set()
        for thread in self._threads:
            thread.join(self.settings.consumer_poll_s + 1)
        self._publish_status()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._statements.close()
        if self.stuck:
            log.warning("%d job thread(s) still busy at exit, not waited for", self.stuck)
        log.info(
            "consumer %s stopped (%s%s)",
            self.host,
            self.lifecycle.reason,
            ", cold" if cold else "",
        )

    # -- the main loop --------------------------------------------------------------

    def _main_loop(self, until_idle: bool) -> None:
        poll_s = self.settings.consumer_poll_s
        failures = 0
        idle_since: float | None = None
        while self.lifecycle.is_running:
            self._wake.clear()
            self._fence_if_lapsed()
            self._expire_timed_out()
            wait_s = poll_s
            try:
                if self._poll is None:
                    claimed = self._claim()
                else:
                    claimed, wait_s = self._claim_on_schedule()
                self._maintain()
                self._publish_if_changed()
                failures = 0
                if until_idle:
                    if claimed or not self._looks_idle():
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= IDLE_POLLS_TO_EXIT * poll_s:
                        return
            except Exception as exc:
                failures += 1
                wait_s = min(poll_s * 2**failures, DB_RETRY_MAX_S)
                self._log_loop_error(exc, wait_s)
            if self.supervisor is not None:
                wait_s = min(wait_s, self.supervisor.next_check_s())
            self._wake.wait(min(wait_s, self._until_next_timeout()))

    def _claim_on_schedule(self) -> tuple[int, float]:
        """Claim if the poll schedule says so; the jobs claimed and the seconds until its next
        claim."""
        assert self._poll is not None
        with self._lock:
            started = time.monotonic()
            due_in = self._poll.claim_due_in(started)
            if due_in == 0:
                self._poll.claim_started()
        if due_in > 0:
            return 0, due_in
        try:
            claimed = self._claim()
        except BaseException:
            with self._lock:
                self._poll.claim_now(time.monotonic())
            raise
        with self._lock:
            now = time.monotonic()
            self._poll.claimed(started, now, claimed)
            return claimed, self._poll.claim_due_in(now)

    def _claim(self) -> int:
        if self._db_state in NOT_CLAIMING_STATES or self._lease.lapsed(time.monotonic()):
            return 0
        # An outcome not yet written keeps its job 'processing' in the database: its slot is
        # not free yet, or the database would count more than capacity on this host.
        unwritten = self.recorder.outstanding
        with self._lock:
            free = self.capacity - len(self._in_flight) - len(self._given_up) - unwritten
            if free <= 0:
                self._more_queued = True
                return 0
            since_restart, since_boot = self._since_restart, self._since_boot
            browser_busy = self._browser_in_flight()
            running_here = [job_id for job_id, _ in self._given_up]
        # Browser jobs only where a browser can run them: this host's stack (under its
        # restart and reboot budgets), or a driver factory the caller gave.
        browser_free = free if self.config.driver_factory is not None else 0
        if self.supervisor is not None:
            free, browser_free = self.supervisor.claim_budget(
                free, since_restart, since_boot, browser_busy
            )
            if free <= 0:
                return 0
        claim = store.claim_jobs(
            self._statements, self.host, free, browser_free, running_here=running_here
        )
        started = time.monotonic()
        with self._lock:
            self._since_restart, self._since_boot = claim.jobs_since_restart, claim.jobs_since_boot
            self._more_queued = claim.more
            for job in claim.jobs:
                self._in_flight[job.key] = InFlight(job, started, self._time_limit_s(job))
            in_flight = len(self._in_flight)
        # A claim without browser jobs changes none of the stack's budgets: not told.
        if self.supervisor is not None and any(job.needs_browser for job in claim.jobs):
            # May start the stack (first browser job), seconds in this thread: the jobs wait.
            self.supervisor.after_claim(
                claim.jobs, in_flight, claim.jobs_since_restart, claim.jobs_since_boot
            )
            with self._lock:
                # A job's time runs from when it can run: not while the stack was starting.
                restamped = time.monotonic()
                for job in claim.jobs:
                    if job.key in self._in_flight:
                        limit_s = self._in_flight[job.key].limit_s
                        self._in_flight[job.key] = InFlight(job, restamped, limit_s)
        light: list[ClaimedJob] = []
        for job in claim.jobs:  # the others started first: they run beside the light ones
            if _is_light(job):
                light.append(job)
            else:
                self.executor.submit(self._work, job)
        if light:
            self._run_light(light)
        return len(claim.jobs)

    def _browser_in_flight(self) -> int:
        """Browser jobs among those in flight (under self._lock)."""
        return sum(1 for f in self._in_flight.values() if f.job.needs_browser)

    def _maintain(self) -> None:
        """Let the supervisor restart or reboot once nothing runs here (stuck threads aside)."""
        if self.supervisor is None:
            return
        with self._lock:
            busy = len(self._in_flight)
            browser_busy = self._browser_in_flight()
        self.supervisor.step(busy, self.recorder.outstanding, browser_busy)

    def _on_lifecycle_change(self) -> None:
        """In the thread that moved the lifecycle: the loops look again, and the producer reads
        the change (draining: no more work here) without waiting for a heartbeat."""
        self._wake.set()
        self._publish_status()

    def _set_own_state(self, state: str) -> None:
        """The supervisor changed the host's state in the database (restarting, disabled...)."""
        self._db_state = state
        self._publish_status()
        self._claim_soon()

    def _set_since_restart(self, count: int) -> None:
        """The supervisor reset the stack's job counter (a start, a restart)."""
        with self._lock:
            self._since_restart = count

    def _looks_idle(self) -> bool:
        with self._lock:
            if self._in_flight:
                return False
        if self.recorder.outstanding:
            return False
        with transaction(self.engine) as conn:
            return queries.host_is_idle(conn, self.host)

    def _log_loop_error(self, exc: Exception, retry_in_s: float) -> None:
        if isinstance(exc, ScrapefleetError):  # database away, host row removed: one line
            log.warning("%s; retrying in %.1f s", exc, retry_in_s)
        else:
            log.exception("consumer loop error; retrying in %.1f s", retry_in_s)

    # -- jobs -----------------------------------------------------------------------

    def _work(self, job: ClaimedJob) -> None:
        """In a pool thread."""
        self._hand_over([(job, self._attempt(job))])

    def _run_light(self, jobs: list[ClaimedJob]) -> None:
        """In the claiming thread, one after the other: jobs of light actions
        (common.actions.registry), their completions written together from this thread."""
        finished = []
        for job in jobs:
            started = time.monotonic()
            finished.append((job, self._attempt(job)))
            took_s = time.monotonic() - started
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
        with self._lock:
            self._cancellers[job.key] = canceller
        try:
            with cancellable(canceller):
                return self._run_attempt(job)
        finally:
            with self._lock:
                self._cancellers.pop(job.key, None)

    def _run_attempt(self, job: ClaimedJob) -> Outcome:
        lease: DriverLease | None = None
        if self.supervisor is not None:
            lease = functools.partial(self.supervisor.lease, job.id)
            if job.profile:  # a browser of its own on the profile's directory
                root = profiles_root(self.config.settings)
                proxy = job_proxy(job, self.config.settings)
                owner = self.config.settings.browser_user
                lease = profile_lease(lease, root, job.profile, proxy, owner)
        elif self.config.driver_factory is not None:
            lease = leases_from(self.config.driver_factory)
        started = time.monotonic()
        outcome = run_job(
            job,
            lease=lease,
            capture_failure=self.config.capture_failure,
            browser_defaults=host_defaults(self.config.settings),
            block_rules=self._block_rules,
            host_starved=self._host_starved,
        )
        # Duration by kind and outcome; a retryable failure with attempts left is a retry (the
        # recorder schedules it).
        retried = (
            outcome.status == "failed" and outcome.retryable and job.attempt < job.max_attempts
        )
        duration_s = time.monotonic() - started
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
        ours: list[tuple[ClaimedJob, Outcome]] = []
        late: list[tuple[ClaimedJob, Outcome]] = []
        with self._lock:
            for job, outcome in finished:
                still_ours = self._in_flight.pop(job.key, None) is not None
                if not still_ours:
                    self._given_up.pop(job.key, None)
                    self._ended.add(job.key)
                (ours if still_ours else late).append((job, outcome))
        if ours and not here:
            self.recorder.submit_many(ours)
        elif ours and self.recorder.record_here(ours):
            self._on_outcomes_written()
        for job, outcome in late:
            log.warning(
                "job %d claim %d returned after it was given up (timeout, stop, rescue or cold"
                " stop); outcome (%s) dropped",
                job.id,
                job.claim,
                outcome.status,
            )
        if late:
            self._confirm_ended()  # its lock key is free again
            self._publish_status()  # the stuck threads' slots are free again
            self._claim_soon()

    def _claim_soon(self) -> None:
        """Let the main loop claim now: with LISTEN it claims on every wake; polling, the
        schedule's next claim is brought forward."""
        if self._poll is not None:
            with self._lock:
                self._poll.claim_now(time.monotonic())
        self._wake.set()

    def _on_outcomes_written(self) -> None:
        """After outcomes were written (by the recorder's thread, or by the claiming thread for
        light jobs): slots are free now; claim if more may be queued, or, polling, once the
        producer has had a moment to refill them."""
        if self._poll is not None:
            with self._lock:
                self._poll.slot_freed(time.monotonic(), more_queued=self._more_queued)
            self._wake.set()
        elif self._more_queued or self.lifecycle.stopping:
            self._wake.set()

    def _time_limit_s(self, job: ClaimedJob) -> float:
        return time_limit_s(job, self.settings.job_timeout_s)

    def _expire_timed_out(self) -> None:
        now = time.monotonic()
        with self._lock:
            expired = [r for r in self._in_flight.values() if now >= r.deadline]
            for running in expired:
                del self._in_flight[running.job.key]
                self._given_up[running.job.key] = running.job
                self._linger_owed.add(running.job.key)
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
            self.recorder.submit(job, replace(timeout, still_running=True))
            self._end_attempt(job)

    def _give_up(self, attempts: frozenset[AttemptKey]) -> None:
        """Attempts no longer ours in the database (an operator stopped them, or the producer
        rescued them from a host it thought dead): end them here. Their browser session is
        ended so that their thread returns; their outcome is dropped."""
        with self._lock:
            gone = [self._in_flight.pop(k) for k in attempts if k in self._in_flight]
            for running in gone:
                self._given_up[running.job.key] = running.job
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
            self._end_attempt(job)

    def _end_attempt(self, job: ClaimedJob) -> None:
        """Make a given-up attempt's thread return: its HTTP requests are closed, its browser
        is killed."""
        with self._lock:
            canceller = self._cancellers.get(job.key)
        if canceller is not None:
            canceller.cancel()
        if self.supervisor is not None:
            self.supervisor.abandon(job.id, job.needs_browser)

    def _confirm_ended(self) -> None:
        """Tell the database which given-up attempts have ended here (their lock keys are free
        again); kept for the next heartbeat if it cannot be told now. An attempt whose release
        is still owed (``_fenced``) waits for it: a confirmation before the release that
        records its lingering would leave its lock key held."""
        with self._lock:
            ended = sorted(
                k for k in self._ended if k not in self._fenced and k not in self._linger_owed
            )
            self._ended.difference_update(ended)
        if not ended:
            return
        try:
            with transaction(self.engine) as conn:
                store.attempts_ended(conn, self.host, ended)
        except Exception as exc:
            log.warning("could not confirm ended attempts %s: %s", ended, describe(exc))
            with self._lock:
                self._ended.update(ended)

    def _on_attempts_written(self, jobs: list[ClaimedJob]) -> None:
        """In the recorder's thread: these attempts' outcomes are in the database now; a
        timed-out one whose thread already returned can have its end confirmed."""
        with self._lock:
            owed = {job.key for job in jobs} & self._linger_owed
            self._linger_owed -= owed
            confirm = bool(owed & self._ended)
        if confirm:
            self._confirm_ended()

    def _fence_if_lapsed(self) -> None:
        """No heartbeat reached the database for too long (consumer.attempt_lease): the
        producer may be about to hand these attempts on. End them here, claim nothing, and
        release them once the database answers (unless it rescued them meanwhile)."""
        now = time.monotonic()
        if not self._lease.lapsed(now):
            return
        with self._lock:
            lost = [f.job for f in self._in_flight.values()]
            self._in_flight.clear()
            for job in lost:
                self._given_up[job.key] = job
                self._fenced[job.key] = job
        if not lost:
            return
        log.warning(
            "no heartbeat reached the database for %.1f s: ending %d attempt(s) (job(s) %s)"
            " before the producer hands them on",
            self._lease.silent_s(now),
            len(lost),
            sorted(job.id for job in lost),
        )
        self._publish_status()
        for job in lost:
            self._end_attempt(job)

    def _release_fenced(self) -> None:
        """The attempts the lapsed lease ended go back to pending (each only while still this
        host's by its claim), lingering while their threads run."""
        with self._lock:
            owed = dict(self._fenced)
            running = {k for k in owed if k in self._given_up}
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
            log.warning("could not release attempts %s yet: %s", sorted(owed), describe(exc))
            return
        with self._lock:
            for key in owed:
                self._fenced.pop(key, None)

    def _until_next_timeout(self) -> float:
        with self._lock:
            if not self._in_flight:
                return math.inf
            soonest = min(r.deadline for r in self._in_flight.values())
        return max(0.01, soonest - time.monotonic())

    # -- heartbeat, listener, status --------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_s):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        # A lease that lapsed while this process could not run (frozen, starved) ends its
        # attempts before this heartbeat renews it: whether the producer rescued them meanwhile
        # or not, the rule is the same every time (the main loop's own check may come second).
        self._fence_if_lapsed()
        sent_at = time.monotonic()
        with self._lock:
            running = list(self._in_flight)
        self._release_fenced()
        self._confirm_ended()
        try:
            with transaction(self.engine) as conn:
                beat = store.heartbeat(conn, self.host, running)
        except Exception as exc:
            log.warning("heartbeat failed: %s", describe(exc))
            self._fence_if_lapsed()
        else:
            self._lease.renew(sent_at)
            self._give_up(beat.gone)
            state = beat.host_state
            if state is None:
                log.warning("host %s has no row in the database; not claiming", self.host)
                state = HostState.DISABLED
            if state != self._db_state:
                log.info("host %s state %s -> %s", self.host, self._db_state, state)
                self._db_state = state
                self._claim_soon()
        self.reporter.sample_system()
        self._publish_status()

    def _listen_loop(self) -> None:
        direct = listen_url(self.settings, self.engine.url)
        assert direct is not None  # else this loop is not started
        url = sqlalchemy_url(direct).update_query_dict(
            {"application_name": f"scrapefleet-consumer {self.host} listen"}
        )
        listener = Listener(
            url.render_as_string(hide_password=False),
            [assigned_channel(self.host)],
            self.settings,
        )
        failures = 0
        try:
            while not self.lifecycle.stopping:
                try:
                    payloads = listener.wait(self.settings.consumer_poll_s)
                    failures = 0
                except DatabaseUnavailable:  # Listener logged it; the poll keeps us going
                    failures += 1
                    self.lifecycle.wait(
                        min(self.settings.consumer_poll_s * 2**failures, DB_RETRY_MAX_S)
                    )
                    continue
                if self.host in payloads:
                    self._wake.set()
        finally:
            listener.close()

    def _publish_status(self) -> None:
        self.reporter.publish(self._snapshot)

    def _publish_if_changed(self) -> None:
        """Rewrite the document if what the producer decides on moved since the last look
        (the browser stack's state, say) between heartbeats; the running count alone never
        triggers a write."""
        with self._lock:
            stuck = len(self._given_up)
        seen = (
            self.state,
            stuck,
            self.lifecycle.state,
            *self._browser_status(),
            *self._browser_limit(),
        )
        if seen != self._published:
            self._published = seen
            self._publish_status()

    def _snapshot(self) -> Snapshot:
        limit, limit_reason = self._browser_limit()
        with self._lock:
            stuck = len(self._given_up)
            running = len(self._in_flight) + stuck
            since_restart, since_boot = self._since_restart, self._since_boot
        return Snapshot(
            running,
            self.capacity,
            self.state,
            since_restart,
            since_boot,
            self.lifecycle.state.value,
            *self._browser_status(),
            stuck=stuck,
            browser_limit=limit,
            browser_limit_reason=limit_reason,
        )

    def _browser_limit(self) -> tuple[int | None, str | None]:
        if self.supervisor is not None:
            return self.supervisor.browser_limit()
        return None, None

    def _browser_status(self) -> tuple[str, str | None, float | None]:
        if self.supervisor is not None:
            return self.supervisor.browser_status()
        if self.config.driver_factory is not None:  # the caller's own browsers
            return BrowserState.READY, None, None
        return BrowserState.ABSENT, "browser = false in this host's settings", None
