"""The consumer's browser stack over time: the I/O around consumer.browser.supervisor.step.

The daemon (consumer.daemon) calls in from its main loop (``claim_budget``, ``after_claim``,
``step``, ``abandon``, ``close``) and from its job threads (``lease``, ``job_returned``).
Each call becomes an event for the pure ``supervisor.step.step``, which decides everything
(consumer.browser.supervisor.states says what the states are and why); this class only carries out
the actions it returns: the stack's start, stop and health check, the reboot command, the database
records, the daemon's callbacks. The actions run on ONE thread, the supervisor's own
(common.runtime.serial_thread, ``stack-<host>``): callers post their event to it and, but for a
browser to kill and the helpers' answers, wait until it and the events its actions answered
are done. So one start, stop or switch runs at a time, and the stacks and pools the host holds
(consumer.browser.supervisor.held_stacks) have one writer. Everything slow runs while no job runs,
except the first start, which the jobs that asked for it wait for.

Time comes from an injected clock (timezone-aware), the database through StackRecords and the
reboot through a callable, so that tests can drive all of it with fakes.

Sessions: the running stack has a consumer.browser.sessions.session_pool.SessionPool of up to
``capacity`` warm sessions; a job leases one at its isolation level (common.browser.isolation). The
pool is made with the stack's start (consumer.browser.stack.launch: its check is the first lease:
Grid, Chromium and BiDi all answer) and closed before the stack stops. Sessions start as jobs need
them; the next stack of an overlapped restart is warmed with as many as the running one's jobs
used at once.

Overlapped restarts: the next stack starts in a helper thread (its own work directory, so
its own display, port, HOME and TMPDIR) while the running one serves; at the switch new leases
go to it and the old one retires, stopped by another helper once its last job has returned.
The helpers (consumer.browser.supervisor.overlap_threads) post what they did to this thread, which
applies it; they do not wait for it. The pools of all stacks share ``capacity`` session permits, so
the host never runs more browser sessions than its capacity, whatever the timing.

The host's browser limit (consumer.browser.supervisor.load_tracker) is sampled on this thread too,
at each step of the main loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Engine

from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.clock import utcnow
from scrapefleet.common.errors import StackError
from scrapefleet.common.runtime.serial_thread import SerialThread
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.sessions.session_operations import BrowserLaunch
from scrapefleet.consumer.browser.sessions.session_permits import SessionPermits
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, StackHealth, StopReport
from scrapefleet.consumer.browser.stack.launch import (
    PoolMaker,
    StackLauncher,
    StackMaker,
    session_pool,
)
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    Action,
    CheckHealth,
    Claimed,
    Close,
    EndSession,
    Event,
    HealthChecked,
    JobAbandoned,
    JobReturned,
    Log,
    OldStacksStopped,
    RebootCommandFailed,
    RebootCommandRan,
    RunRebootCommand,
    SetHostState,
    SetStackCounter,
    StartFailed,
    StartNextStack,
    StartStack,
    StartSucceeded,
    StopOldStacks,
    StopStack,
    SwitchStacks,
    Tick,
)
from scrapefleet.consumer.browser.supervisor.held_stacks import HostStacks, pss_bytes
from scrapefleet.consumer.browser.supervisor.load_tracker import LoadLimit, Sampler
from scrapefleet.consumer.browser.supervisor.overlap_threads import (
    HelperRun,
    NextStackUp,
    Outcome,
    RetiredStopped,
    combined,
    start_next,
    stop_retired,
)
from scrapefleet.consumer.browser.supervisor.reboot_command import RebootRunner, run_reboot_command
from scrapefleet.consumer.browser.supervisor.stack_readouts import Clock, StackViews
from scrapefleet.consumer.browser.supervisor.stack_writes import StackRecords, StoreRecords
from scrapefleet.consumer.browser.supervisor.states import Policy, StackState
from scrapefleet.consumer.browser.supervisor.step import step

log = logging.getLogger(__name__)


def stack_policy(settings: Settings, capacity: int) -> Policy:
    # An empty or missing reboot_command means no reboot mechanism on this host.
    command = getattr(settings, "reboot_command", None) or None
    return Policy(
        restart_every=settings.restart_every,
        reboot_every=settings.reboot_every,
        reboot_command=command,
        retry_base_s=settings.stack_retry_base_s,
        retry_max_s=settings.stack_retry_max_s,
        overlap_lead=capacity if settings.overlap_restarts else 0,
    )


class StackSupervisor(StackViews):
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        host: str,
        capacity: int,
        *,
        on_host_state: Callable[[str], None],
        on_stack_counter: Callable[[int], None],
        stack: BrowserStack | None = None,
        clock: Clock = utcnow,
        records: StackRecords | None = None,
        reboot: RebootRunner = run_reboot_command,
        make_pool: PoolMaker = session_pool,
        make_stack: StackMaker | None = None,
        sample_load: Sampler | None = None,
        cores: int | None = None,
        threads: SideThreads | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.capacity = capacity
        # Its helpers (next stack, retiring stacks, a session to end), the session pools'
        # threads and its own thread, all watched.
        self._threads = threads or SideThreads()
        self._launcher = StackLauncher(
            settings, host, capacity, make_pool, make_stack, self._threads
        )
        self.records: StackRecords = records or StoreRecords(engine, host)
        self._clock = clock
        self._reboot = reboot
        self._on_host_state = on_host_state  # the daemon's own idea of the host state
        self._on_stack_counter = on_stack_counter  # ... and of jobs_since_restart
        self._lock = threading.Lock()  # one step at a time; guards the holdings too
        self._state = StackState(stack_policy(settings, capacity))
        first = stack or self._launcher.make_stack(self._launcher.work_dirs[0])
        self._stacks = HostStacks(first, self._lock)
        self._permits = SessionPermits(capacity)  # sessions of all stacks together
        # The last helper of each kind (consumer.browser.supervisor.overlap_threads), which a stop
        # joins.
        self._next_run: HelperRun | None = None
        self._retire_run: HelperRun | None = None
        self._unwritten: SetHostState | None = None  # host back to active, still to be written
        # How many browser jobs the host carries now (consumer.browser.supervisor.load_tracker);
        # sampled and adjusted at the main loop's step, read by claims and the status document.
        self._load = LoadLimit(host, capacity, cores, sample_load)
        self._own = SerialThread(f"stack-{host}", self._threads)

    # -- what the daemon tells --------------------------------------------------------------

    def clean_leftovers(self) -> None:
        """At consumer start: end whatever a consumer killed with SIGKILL left of its stacks."""
        self._launcher.clean_leftovers(self.stack)

    def after_claim(
        self, jobs: Sequence[ClaimedJob], in_flight: int, since_restart: int, since_boot: int
    ) -> None:
        """Start the stack for the first browser job; begin the drain when a budget is spent.
        The counters are the host row's after the claim; ``in_flight`` is not needed."""
        browser = [job.id for job in jobs if job.needs_browser]
        self._stacks.claimed(browser)
        self._feed(Claimed(len(browser), since_restart, since_boot))

    def step(self, busy: int, unwritten: int, browser_busy: int | None = None) -> None:
        """Main loop: notice faults, do the due maintenance once nothing runs here, try a
        failing stack again when its time has come and no browser job is in flight."""
        browser_jobs = busy if browser_busy is None else browser_busy

        def tick() -> None:
            if self._unwritten is not None:
                self._set_host_state(self._unwritten)
            self._load.follow(self._clock().timestamp(), browser_jobs)
            retiring = self.retiring_busy, self.retiring_done
            self._carry_out(Tick(busy, unwritten, browser_jobs, *retiring))

        self._own.run(tick)

    @contextmanager
    def lease(
        self, job_id: int, isolation: Isolation, *, launch: BrowserLaunch | None = None
    ) -> Iterator[Any]:
        """The job's driver, for as long as the job runs (a job thread). StackError when the
        stack has no session to give. ``launch``: a persistent profile's browser."""
        pool = self._stacks.lease_pool(job_id)
        try:
            if not self.running or pool is None:
                raise StackError(f"the browser stack of {self.host} is not running")
            extra = {} if launch is None else {"launch": launch}
            with pool.lease(isolation, **extra) as driver:
                self._stacks.session_began(job_id, driver)
                try:
                    yield driver
                finally:
                    self._stacks.session_ended(job_id)
        finally:
            self._stacks.lease_ended(job_id)

    def job_returned(self, job_id: int, browser: bool, released: bool, slow: bool = False) -> None:
        """A job thread is done with its job (a job thread). ``slow``: released because a
        Grid call timed out, which lowers the host's browser limit instead of counting as a
        fault of the stack."""
        self._stacks.returned(job_id)
        if slow and released:
            self._note_slow("a browser job's Grid call timed out")
        self._feed(JobReturned(job_id, browser, released, slow=slow and released))

    def abandon(self, job_id: int, browser: bool) -> None:
        """The job is past its timeout: kill its browser so that its thread returns (not
        waited for: the heartbeat's thread calls this too, and must not wait for a start)."""
        self._feed(JobAbandoned(job_id, browser), wait=False)

    def start(self) -> None:
        """From now on the actions run on the supervisor's own thread."""
        self._own.start()

    def close(self) -> None:
        self._feed(Close())
        self._own.stop(self.settings.consumer_poll_s + 1)

    # -- carrying out (the supervisor's thread) ---------------------------------------------

    def _feed(self, event: Event, *, wait: bool = True) -> None:
        """``event`` to the supervisor's thread (common.runtime.serial_thread); ``wait``: until it
        and what its actions answered are carried out."""
        self._own.run(lambda: self._carry_out(event), wait=wait)

    def _carry_out(self, event: Event) -> None:
        """Step the state on ``event``, then do the actions, feeding back what they answer.
        The lock covers the steps only: a job thread reading the state is never held up by a
        start or a stop."""
        events = [event]
        while events:
            with self._lock:
                self._state, actions = step(self._state, events.pop(0), self._clock())
            for action in actions:
                answer = self._do(action)
                if answer is not None:
                    events.append(answer)

    def _do(self, action: Action) -> Event | None:
        match action:
            case StartStack(measure_memory=measure):
                return self._start(measure)
            case StopStack(measure_memory=measure):
                before = pss_bytes(self.stack) if measure else 0
                return combined(self._stop_everything(), before)
            case StartNextStack():
                self._next_run = self._start_next()
            case SwitchStacks():
                self._switch()
            case StopOldStacks():
                done = self._stacks.retired_done()
                self._retire_run = self._helper("retire-stack", lambda: stop_retired(done))
            case CheckHealth():
                health = self.stack.health()
                if health is StackHealth.SLOW:
                    # Its processes run and it answered late: slowness, which fewer browser
                    # jobs cure; a restart would cost more CPU than the jobs it protects.
                    self._note_slow("the Grid answered its status late")
                return HealthChecked(health is not StackHealth.DOWN)
            case RunRebootCommand(command=command):
                failure = self._reboot(command)
                return RebootCommandRan() if failure is None else RebootCommandFailed(failure)
            case EndSession(job_id=job_id):
                self._end_session(job_id)
            case SetStackCounter(jobs=jobs):
                self._on_stack_counter(jobs)
            case Log(level=level, message=message):
                log.log(level, "host %s: %s", self.host, message)
            case SetHostState():
                self._set_host_state(action)
            case _:
                self.records.write(action)
        return None

    def _start(self, measure: bool) -> Event:
        # Sessions start as jobs need them: a host whose jobs come one at a time runs one
        # browser, not ``capacity``.
        started = self._launcher.start(self.stack, 0, self._permits)
        if isinstance(started, str):
            return StartFailed(started)
        self._stacks.set_pool(started)
        return StartSucceeded(pss_bytes(self.stack) if measure else 0)

    def _start_next(self) -> HelperRun:
        """The next stack, started by a helper in a work directory no running or retiring
        stack uses (the state machine starts one only when a directory is free), warmed with
        as many sessions as the running stack's jobs needed at once, no more."""
        taken = self._stacks.taken_work_dirs()
        work_dir = next((d for d in self._launcher.work_dirs if d not in taken), None)
        pool = self._stacks.pool
        warm = min(pool.peak_leased if pool is not None else 1, self.capacity) - 1
        running, launcher, permits = self.stack, self._launcher, self._permits
        return self._helper(
            "next-stack", lambda: start_next(launcher, work_dir, running, warm, permits)
        )

    def _helper(self, name: str, work: Callable[[], Outcome]) -> HelperRun:
        """A helper thread: it does one slow thing and posts what it did to this thread."""
        return HelperRun(f"{name}-{self.host}", work, self._threads, self._post)

    def _post(self, run: HelperRun) -> None:
        """A helper is done (its thread): the rest is this thread's, not waited for."""

        def answer() -> None:
            event = self._apply(run)
            if event is not None:
                self._carry_out(event)

        self._own.run(answer, wait=False)

    def _apply(self, run: HelperRun) -> Event | None:
        """What a helper did, applied to the holdings once (by its posted run, or before that
        by a stop that joined it); the answer for the state machine."""
        if run.answer is None:
            run.answer = self._applied(run.outcome)
        return run.answer

    def _applied(self, outcome: Outcome | None) -> Event | None:
        match outcome:
            case NextStackUp(held=held, started=started):
                self._stacks.adopt_next(held)
                return started
            case RetiredStopped(stopped=stopped, reports=reports):
                return OldStacksStopped(combined(reports), self._stacks.drop_retired(stopped))
        return outcome  # NextStackFailed: nothing to apply (None: the helper raised)

    def _switch(self) -> None:
        retired = self._stacks.switch()
        if retired is not None:
            # Its idle sessions end now, but for the jobs claimed for it that have yet to
            # lease, so that their permits go to the new stack.
            old_pool, waiting = retired
            old_pool.release_idle(waiting)

    def _stop_everything(self) -> list[StopReport]:
        """The running stack, a next one and retired ones: every process ended."""
        self._permits.interrupt()  # a next stack's check waiting for a session gives up
        for run in (self._next_run, self._retire_run):
            if run is not None and run.thread is not threading.current_thread():
                run.thread.join()  # bounded: a start or a stop has its own timeouts
                self._apply(run)  # a next stack it started is stopped below too
        reports = []
        for stack, pool in [*self._stacks.take_others(), (self.stack, self._stacks.pool)]:
            if pool is not None:
                pool.close(wait=False)  # the stop below ends its sessions' browsers
            reports.append(stack.stop())
        self._stacks.set_pool(None)
        # No session of those stacks is left: the next stack counts from zero.
        self._permits = SessionPermits(self.capacity)
        return reports

    def _note_slow(self, what: str) -> None:
        self._load.note_slow(self._clock().timestamp(), what)

    def _end_session(self, job_id: int) -> None:
        driver = self._stacks.take_session(job_id)
        if driver is not None:
            stack = self.stack
            self._threads.start(
                f"end-session-{job_id}", lambda: stack.end_session(driver), lasting=False
            )

    def _set_host_state(self, change: SetHostState) -> None:
        moved = self.records.write(change)
        if change.to_state != "active":
            self._on_host_state(change.to_state)  # the daemon claims nothing more, at once
            return
        self._unwritten = change if moved is None else None  # retried at the next step
        if moved:  # not when an operator drained or disabled the host meanwhile
            self._on_host_state("active")
