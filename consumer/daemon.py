"""The consumer daemon of one host: claim its queued jobs, run them in threads, report.

Threads, each with one job:
- main (``run``): wakes on a NOTIFY for this host, on a freed slot while more work may be
  queued, or every ``consumer_poll_s``; claims up to the free slots in ONE statement, hands the
  jobs to a pool of ``capacity`` threads, and enforces ``job_timeout_s``;
- workers (the pool): run one job each with consumer.runner and pass the outcome on;
- recorder (consumer.recorder): writes outcomes, a batch per transaction;
- heartbeat: every ``heartbeat_s`` marks the running jobs and the host alive, learns the host
  state an operator may have changed (draining, disabled, active again), rewrites the status file;
- listener: LISTEN for assignments (the poll covers a NOTIFY lost across a reconnect).

The browser stack (when ``settings.browser``) belongs to a consumer.stack_supervisor, which
the main loop consults before and after each claim and lets do restarts and reboots between
them; failure artifacts are captured per failed browser attempt and pruned hourly
(consumer.artifact_janitor).

Shutdown is the ``_stop`` Event, which every loop checks. Stopping hands the host's queued jobs
back, lets in-flight jobs finish (at most ``job_timeout_s``), leaves the host offline.

A job past its timeout is recorded as a failed attempt at once; its thread cannot be killed, so
it is counted as stuck and keeps its pool slot until it returns. The status document has no
field of its own for stuck threads: they are counted in ``running``, which is what the producer
needs (busy slots), and logged.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from scrapefleet.common import metrics, queries, store
from scrapefleet.common.actions import load_user_actions
from scrapefleet.common.constants import CHANNEL_ASSIGNED
from scrapefleet.common.db import Listener, describe, transaction
from scrapefleet.common.errors import DatabaseUnavailable, ScrapefleetError
from scrapefleet.common.host_status import HOST_STATES
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer import artifacts
from scrapefleet.consumer.artifact_janitor import ArtifactJanitor
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.runner import CaptureFailure, DriverFactory, Outcome, run_job
from scrapefleet.consumer.stack_supervisor import StackSupervisor, needs_browser
from scrapefleet.consumer.status_report import Snapshot, StatusReporter, read_boot_id

log = logging.getLogger(__name__)

# Reason under which a stopping consumer drains its own host; a restart recognises it (an
# operator's drain has another reason and is kept).
OWN_DRAIN_REASON = "consumer stopping"
NOT_CLAIMING_STATES = ("draining", "disabled")
DB_RETRY_MAX_S = 10.0  # longest wait between attempts while the database is unreachable
DRAIN_CHECK_S = 0.05  # drain loop period while in-flight jobs finish
IDLE_POLLS_TO_EXIT = 2  # run(until_idle=True): idle for this many polls -> exit


@dataclass(frozen=True)
class _Running:
    job: ClaimedJob
    started: float  # time.monotonic()


class Consumer:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        host_name: str,
        *,
        driver_factory: DriverFactory | None = None,
        capture_failure: CaptureFailure | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.host = host_name
        self.driver_factory = driver_factory
        self.capture_failure = capture_failure or artifacts.capture_into(settings.artifacts_dir)
        # Set at start when this consumer owns a browser stack: settings.browser and no
        # driver factory from the caller (tests pass fakes).
        self.supervisor: StackSupervisor | None = None
        self.capacity = settings.capacity  # replaced by the host row's capacity at start
        self._stop = threading.Event()
        self._closed = threading.Event()  # set last: the heartbeat stops
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the fields below
        self._in_flight: dict[int, _Running] = {}
        self._stuck = 0
        self._more_queued = False  # last claim filled every free slot: claim again on a finish
        self._db_state = "active"
        self._since_restart = 0
        self._since_boot = 0
        self._stop_reason = "stopped"
        self._stop_deadline = math.inf
        self._final = False
        self._threads: list[threading.Thread] = []
        self._executor: ThreadPoolExecutor | None = None
        self._reporter: StatusReporter | None = None
        self._recorder: OutcomeRecorder | None = None
        self._janitor = ArtifactJanitor(settings, self._closed)

    # -- public ---------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Busy pool threads: jobs running plus threads stuck past their job's timeout."""
        with self._lock:
            return len(self._in_flight) + self._stuck

    @property
    def stuck(self) -> int:
        with self._lock:
            return self._stuck

    @property
    def state(self) -> str:
        """The state this consumer reports in its status document."""
        if self._final:
            return "offline"
        if self._stop.is_set():
            return "draining"
        # 'offline' in the database is the producer's verdict on reachability; this consumer is
        # alive and serving, which is what its own document says.
        if self._db_state == "offline" or self._db_state not in HOST_STATES:
            return "active"
        if self.supervisor is not None and self._db_state not in NOT_CLAIMING_STATES:
            return self.supervisor.maintenance_state or self._db_state
        return self._db_state

    def request_stop(self, reason: str = "stop requested") -> None:
        """Begin the drain; safe from any thread (main.py calls it from a signal's helper)."""
        if self._stop.is_set():
            return
        self._stop_reason = reason
        self._stop_deadline = time.monotonic() + self.settings.job_timeout_s
        self._stop.set()
        self._wake.set()

    def run(self, until_idle: bool = False) -> int:
        """Serve until request_stop (or, with ``until_idle``, until there is nothing left to do
        here); returns the exit code, 0. Raises DatabaseUnavailable if the database cannot be
        reached at start, SettingsError for a bad ``actions`` setting."""
        self._start()
        try:
            self._main_loop(until_idle)
            self.request_stop("idle" if until_idle else "stop requested")
            log.info("consumer %s stopping (%s)", self.host, self._stop_reason)
            self._drain()
        finally:
            self._finish()
        return 0

    # -- start and stop -------------------------------------------------------------

    def _start(self) -> None:
        load_user_actions(self.settings.actions)
        boot_id = read_boot_id(self.settings.boot_id_file)
        with transaction(self.engine) as conn:
            store.reactivate_after_own_drain(conn, self.host, OWN_DRAIN_REASON)
            registration = store.register_consumer(conn, self.host, self.settings.capacity, boot_id)
            recovered = store.recover_host_jobs(conn, self.host)
        self.capacity = registration.capacity
        self._db_state = registration.state
        self._since_restart = registration.jobs_since_restart
        self._since_boot = registration.jobs_since_boot
        self._executor = ThreadPoolExecutor(self.capacity, thread_name_prefix=f"job-{self.host}")
        if self.driver_factory is None and self.settings.browser:
            self.supervisor = StackSupervisor(
                self.settings,
                self.engine,
                self.host,
                self.capacity,
                on_host_state=self._set_own_state,
                on_stack_counter=self._set_since_restart,
            )
            self.supervisor.clean_leftovers()
            metrics.track_browser_memory(self.host, self.supervisor.memory_pss_bytes)
        self._janitor.start()
        self._reporter = StatusReporter(self.settings.state_dir, self.host, boot_id)
        self._recorder = OutcomeRecorder(
            self.engine,
            self.host,
            self.settings,
            before_commit=self._publish_status,
            after_write=self._on_outcomes_written,
            give_up=lambda: self._stop.is_set() and time.monotonic() > self._stop_deadline,
        )
        self._recorder.start()
        self._publish_status()
        for target, name in ((self._heartbeat_loop, "heartbeat"), (self._listen_loop, "listen")):
            thread = threading.Thread(target=target, name=f"{name}-{self.host}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info(
            "consumer %s started: capacity %d, state %s, %d interrupted job(s) recovered",
            self.host,
            self.capacity,
            self._db_state,
            len(recovered),
        )

    def _drain(self) -> None:
        """No new claims (the loop has ended); queued jobs handed back; in-flight finish."""
        self._hand_back_queued()
        while time.monotonic() < self._stop_deadline + 1.0:
            self._expire_timed_out()
            assert self._recorder is not None
            with self._lock:
                busy = len(self._in_flight)
            if busy == 0 and self._recorder.outstanding == 0:
                return
            self._wake.wait(DRAIN_CHECK_S)
            self._wake.clear()

    def _hand_back_queued(self) -> None:
        """Host to draining (unless an operator already chose its state), queued jobs back to
        pending for the other hosts. Retried while the database is away, up to the deadline."""
        wait_s = self.settings.consumer_poll_s
        while True:
            try:
                with transaction(self.engine) as conn:
                    store.set_host_state(
                        conn, self.host, "draining", OWN_DRAIN_REASON, expected=["active"]
                    )
                    handed = store.requeue_host_queued(
                        conn, self.host, f"requeued: consumer on {self.host} stopping"
                    )
                if handed:
                    log.info("handed %d queued job(s) back", len(handed))
                return
            except DatabaseUnavailable as exc:
                if time.monotonic() + wait_s > self._stop_deadline:
                    log.warning("could not hand queued jobs back: %s", exc)
                    return
                log.warning("handing queued jobs back failed (%s); retrying", exc)
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, DB_RETRY_MAX_S)

    def _finish(self) -> None:
        self.request_stop(self._stop_reason)
        if self._recorder is not None:
            self._recorder.close(timeout_s=max(0.0, self._stop_deadline - time.monotonic()) + 1)
        if self.supervisor is not None:
            self.supervisor.close()
        try:
            with transaction(self.engine) as conn:
                # Jobs assigned while we drained, then the host offline if we drained it.
                store.requeue_host_queued(
                    conn, self.host, f"requeued: consumer on {self.host} stopped"
                )
                store.set_host_state(
                    conn,
                    self.host,
                    "offline",
                    f"consumer stopped: {self._stop_reason}",
                    expected=["draining"],
                )
        except Exception as exc:
            log.warning("could not mark host %s offline: %s", self.host, describe(exc))
        self._final = True
        self._closed.set()
        for thread in self._threads:
            thread.join(self.settings.consumer_poll_s + 1)
        if self._reporter is not None:
            self._publish_status()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self.stuck:
            log.warning("%d job thread(s) still stuck past their timeout at exit", self.stuck)
        log.info("consumer %s stopped (%s)", self.host, self._stop_reason)

    # -- the main loop --------------------------------------------------------------

    def _main_loop(self, until_idle: bool) -> None:
        poll_s = self.settings.consumer_poll_s
        failures = 0
        idle_since: float | None = None
        while not self._stop.is_set():
            self._wake.clear()
            self._expire_timed_out()
            wait_s = poll_s
            try:
                claimed = self._claim()
                self._maintain()
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

    def _claim(self) -> int:
        if self._db_state in NOT_CLAIMING_STATES:
            return 0
        assert self._recorder is not None
        # An outcome not yet written keeps its job 'processing' in the database: its slot is
        # not free yet, or the database would count more than capacity on this host.
        unwritten = self._recorder.outstanding
        with self._lock:
            free = self.capacity - len(self._in_flight) - self._stuck - unwritten
            if free <= 0:
                self._more_queued = True
                return 0
            since_restart, since_boot = self._since_restart, self._since_boot
        if self.supervisor is not None:  # the stack's restart and reboot budgets
            free = self.supervisor.claim_budget(free, since_restart, since_boot)
            if free <= 0:
                return 0
        with transaction(self.engine) as conn:
            claim = store.claim_jobs(conn, self.host, free)
        started = time.monotonic()
        with self._lock:
            self._since_restart, self._since_boot = claim.jobs_since_restart, claim.jobs_since_boot
            self._more_queued = len(claim.jobs) == free
            for job in claim.jobs:
                self._in_flight[job.id] = _Running(job, started)
            in_flight = len(self._in_flight)
        if self.supervisor is not None and claim.jobs:
            # May start the stack (first browser job), seconds in this thread: the jobs wait.
            self.supervisor.after_claim(
                claim.jobs, in_flight, claim.jobs_since_restart, claim.jobs_since_boot
            )
            with self._lock:
                # A job's time runs from when it can run: not while the stack was starting.
                restamped = time.monotonic()
                for job in claim.jobs:
                    if job.id in self._in_flight:
                        self._in_flight[job.id] = _Running(job, restamped)
        if claim.jobs:
            self._publish_status()
            assert self._executor is not None
            for job in claim.jobs:
                self._executor.submit(self._work, job)
        return len(claim.jobs)

    def _maintain(self) -> None:
        """Let the supervisor restart or reboot once nothing runs here (stuck threads aside)."""
        if self.supervisor is None:
            return
        assert self._recorder is not None
        with self._lock:
            busy = len(self._in_flight)
        self.supervisor.step(busy, self._recorder.outstanding)

    def _set_own_state(self, state: str) -> None:
        """The supervisor changed the host's state in the database (restarting, disabled...)."""
        self._db_state = state
        self._publish_status()
        self._wake.set()

    def _set_since_restart(self, count: int) -> None:
        """The supervisor reset the stack's job counter (a start, a restart)."""
        with self._lock:
            self._since_restart = count

    def _looks_idle(self) -> bool:
        assert self._recorder is not None
        with self._lock:
            if self._in_flight:
                return False
        if self._recorder.outstanding:
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
        factory = self.driver_factory
        if self.supervisor is not None:
            factory = functools.partial(self.supervisor.new_driver, job.id)
        started = time.monotonic()
        outcome = run_job(job, driver_factory=factory, capture_failure=self.capture_failure)
        # Metrics (issue 6): duration by kind and outcome; a retryable failure with attempts
        # left is a retry (the recorder schedules it).
        retried = (
            outcome.status == "failed" and outcome.retryable and job.attempt < job.max_attempts
        )
        metrics.observe_job(job.kind, outcome.status, time.monotonic() - started, retried=retried)
        if self.supervisor is not None:
            self.supervisor.job_returned(
                job.id, needs_browser(job.kind), released=outcome.status == "released"
            )
        with self._lock:
            ours = self._in_flight.pop(job.id, None) is not None
            if not ours:
                self._stuck -= 1
        assert self._recorder is not None
        if ours:
            self._recorder.submit(job, outcome)
        else:
            log.warning(
                "job %d attempt %d returned after its timeout was recorded; outcome (%s) dropped",
                job.id,
                job.attempt,
                outcome.status,
            )
            self._publish_status()  # the stuck thread's slot is free again
            self._wake.set()

    def _on_outcomes_written(self) -> None:
        """In the recorder's thread: slots are free now; claim if more may be queued."""
        if self._more_queued or self._stop.is_set():
            self._wake.set()

    def _expire_timed_out(self) -> None:
        limit = self.settings.job_timeout_s
        now = time.monotonic()
        with self._lock:
            expired = [r for r in self._in_flight.values() if now - r.started >= limit]
            for running in expired:
                del self._in_flight[running.job.id]
            self._stuck += len(expired)
        assert self._recorder is not None
        for running in expired:
            job = running.job
            log.warning("job %d attempt %d timed out after %g s", job.id, job.attempt, limit)
            self._recorder.submit(
                job, Outcome.failed(f"TimeoutError: job exceeded job_timeout_s ({limit:g} s)")
            )
            if self.supervisor is not None:  # its browser is killed, so its thread returns
                self.supervisor.abandon(job.id, needs_browser(job.kind))

    def _until_next_timeout(self) -> float:
        with self._lock:
            if not self._in_flight:
                return math.inf
            oldest = min(r.started for r in self._in_flight.values())
        return max(0.01, oldest + self.settings.job_timeout_s - time.monotonic())

    # -- heartbeat, listener, status --------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_s):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        with self._lock:
            ids = list(self._in_flight)
        try:
            with transaction(self.engine) as conn:
                state = store.heartbeat(conn, self.host, ids)
        except Exception as exc:
            log.warning("heartbeat failed: %s", describe(exc))
        else:
            if state is None:
                log.warning("host %s has no row in the database; not claiming", self.host)
                state = "disabled"
            if state != self._db_state:
                log.info("host %s state %s -> %s", self.host, self._db_state, state)
                self._db_state = state
                self._wake.set()
        assert self._reporter is not None
        self._reporter.sample_system()
        self._publish_status()

    def _listen_loop(self) -> None:
        url = self.engine.url.update_query_dict(
            {"application_name": f"scrapefleet-consumer {self.host} listen"}
        ).render_as_string(hide_password=False)
        listener = Listener(url, [CHANNEL_ASSIGNED])
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    payloads = listener.wait(self.settings.consumer_poll_s)
                    failures = 0
                except DatabaseUnavailable:  # Listener logged it; the poll keeps us going
                    failures += 1
                    self._stop.wait(min(self.settings.consumer_poll_s * 2**failures, 10.0))
                    continue
                if self.host in payloads:
                    self._wake.set()
        finally:
            listener.close()

    def _publish_status(self) -> None:
        assert self._reporter is not None
        self._reporter.publish(self._snapshot)

    def _snapshot(self) -> Snapshot:
        with self._lock:
            running = len(self._in_flight) + self._stuck
            since_restart, since_boot = self._since_restart, self._since_boot
        return Snapshot(running, self.capacity, self.state, since_restart, since_boot)
