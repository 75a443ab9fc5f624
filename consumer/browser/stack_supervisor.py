"""The consumer's browser stack over time: the I/O around consumer.browser.stack_step.

The daemon (consumer.daemon) calls in from its main loop (``claim_budget``, ``after_claim``,
``step``, ``abandon``, ``close``) and from its job threads (``lease``, ``job_returned``).
Each call becomes an event for the pure ``stack_step.step``, which decides everything
(consumer.browser.stack_states says what the states are and why); this class only carries out the
actions it returns: the stack's start, stop and health check, the reboot command, the database
records, the daemon's callbacks. The actions run on ONE thread, the supervisor's own
(common.runtime.serial_thread, ``stack-<host>``): callers post their event to it and, but for a
browser to kill and the helpers' answers, wait until it and the events its actions answered
are done. So one start, stop or switch runs at a time and the running pool (``_pool``) has
one writer. Everything slow runs while no job runs, except the first start, which the jobs
that asked for it wait for.

Time comes from an injected clock (timezone-aware), the database through StackRecords and the
reboot through a callable, so that tests can drive all of it with fakes.

Sessions: the running stack has a consumer.browser.sessions.SessionPool of up to ``capacity`` warm
sessions; a job leases one at its isolation level (common.browser.isolation). The pool is made
with the stack's start (whose check is the first lease: Grid, Chromium and BiDi all answer)
and closed before the stack stops. Sessions start as jobs need them; the next stack of an
overlapped restart is warmed with as many as the running one's jobs used at once.

Overlapped restarts: the next stack starts in a helper thread (its own work directory, so
its own display, port, HOME and TMPDIR) while the running one serves; at the switch new leases
go to it and the old one retires, stopped by another helper once its last job has returned.
The helpers post their answer as an event and do not wait for it.
The pools of all stacks share ``capacity`` session permits, so the host never runs more
browser sessions than its capacity, whatever the timing.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.clock import utcnow
from scrapefleet.common.db.engines import describe
from scrapefleet.common.errors import StackError
from scrapefleet.common.runtime.serial_thread import SerialThread
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser import load as browser_load
from scrapefleet.consumer.browser.driver_sessions import BrowserLaunch
from scrapefleet.consumer.browser.load import BrowserLoad, HostSampler, LoadSample
from scrapefleet.consumer.browser.session_permits import SessionPermits
from scrapefleet.consumer.browser.sessions import SessionPool
from scrapefleet.consumer.browser.stack import (
    BrowserStack,
    SessionStartPaused,
    StackHealth,
    StopReport,
)
from scrapefleet.consumer.browser.stack_events import (
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
    NextStackFailed,
    NextStackStarted,
    OldStacksStopped,
    RebootCommandFailed,
    RebootCommandRan,
    RunRebootCommand,
    SetHostState,
    SetStackCounter,
    StackStopped,
    StartFailed,
    StartNextStack,
    StartStack,
    StartSucceeded,
    StopOldStacks,
    StopStack,
    SwitchStacks,
    Tick,
)
from scrapefleet.consumer.browser.stack_records import StackRecords, StoreRecords
from scrapefleet.consumer.browser.stack_states import (
    STACK_DIRECTORIES,
    Policy,
    StackState,
    browser_status,
    claim_budget,
    is_running,
    maintenance_state,
    next_check_s,
)
from scrapefleet.consumer.browser.stack_step import step

log = logging.getLogger(__name__)

REBOOT_COMMAND_TIMEOUT_S = 120.0
FIRST_SESSION_TRIES = 3  # a stack's first browser session, while its Grid stays up

Clock = Callable[[], datetime]
RebootRunner = Callable[[str], "str | None"]  # the command -> None once it ran, else why not
# (session maker, size, keepalive_s, shared permits, permit wait) -> one stack's sessions
PoolMaker = Callable[[Callable[[], Any], int, float, SessionPermits, float], SessionPool]
StackMaker = Callable[[Path], BrowserStack]  # work directory -> a stack (tests give fakes)
Sampler = Callable[[float], LoadSample]  # unix time -> the host's load now
# The running stack, the next one and one retiring rotate between these directories.
STACK_DIR_NAMES = tuple("abcdefgh"[:STACK_DIRECTORIES])


def session_pool(
    make_driver: Callable[[], Any],
    size: int,
    keepalive_s: float,
    permits: SessionPermits,
    permit_wait_s: float,
) -> SessionPool:
    return SessionPool(
        make_driver,
        size,
        keepalive_s=keepalive_s,
        session_permits=permits,
        permit_wait_s=permit_wait_s,
    )


def stack_work_dirs(state_dir: Path, host: str) -> tuple[Path, ...]:
    """Fixed per host, so that a consumer started again finds what the last one left."""
    return tuple(state_dir / "stack" / host / name for name in STACK_DIR_NAMES)


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


def _combined(reports: Sequence[StopReport], pss_before_bytes: int = 0) -> StackStopped:
    return StackStopped(
        sum(r.killed for r in reports),
        sum(r.sigkilled for r in reports),
        tuple(pid for r in reports for pid in r.leftover_pids),
        pss_before_bytes,
    )


def run_reboot_command(command: str) -> str | None:
    """Run the configured reboot command; None when it exited 0, else why it did not."""
    try:
        argv = shlex.split(command)
        if not argv:
            return "the reboot command is empty"
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=REBOOT_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return f"reboot command {command!r} could not run: {exc}"
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()[-300:]
        return f"reboot command {command!r} exited {done.returncode}: {stderr}"
    return None


class StackSupervisor:
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
        self._work_dirs = stack_work_dirs(settings.state_dir, host)
        self._make_stack: StackMaker = make_stack or (
            lambda work_dir: BrowserStack(settings, host, capacity, work_dir)
        )
        self.stack = stack or self._make_stack(self._work_dirs[0])
        self.records: StackRecords = records or StoreRecords(engine, host)
        self._clock = clock
        self._reboot = reboot
        self._make_pool = make_pool
        self._on_host_state = on_host_state  # the daemon's own idea of the host state
        self._on_stack_counter = on_stack_counter  # ... and of jobs_since_restart
        self.capacity = capacity
        self._lock = threading.Lock()  # one event at a time; guards _sessions too
        self._state = StackState(stack_policy(settings, capacity))
        self._sessions: dict[int, Any] = {}  # job id -> its live driver
        self._pool: SessionPool | None = None  # the running stack's sessions
        self._permits = SessionPermits(capacity)  # sessions of all stacks together
        # A lease waits for a permit while the retiring stack's jobs finish; no longer than a
        # job may run, plus a session's start.
        self._permit_wait_s = settings.job_timeout_s + settings.session_create_timeout_s
        self._next: tuple[BrowserStack, SessionPool] | None = None  # started, not yet in use
        self._next_thread: threading.Thread | None = None
        self._retiring: list[tuple[BrowserStack, SessionPool]] = []
        # Browser jobs claimed and not yet returned -> the pool of the stack whose budget they
        # were claimed under (or, claimed before the first stack ran, the pool they lease
        # from): a job claimed just before a switch still runs on the old stack.
        self._claimed_on: dict[int, SessionPool] = {}
        self._retire_thread: threading.Thread | None = None
        self._unwritten: SetHostState | None = None  # host back to active, still to be written
        # How many browser jobs the host carries now (consumer.browser.load); sampled and
        # adjusted by the main loop's step, read by claims and the status document.
        self._load = BrowserLoad.starting(capacity, cores)
        self._sample_load: Sampler = sample_load or HostSampler().sample
        self._sampled_at: float | None = None
        # Its helpers (next stack, retiring stacks, a session to end) and its own thread.
        self._threads = threads or SideThreads()
        self._own = SerialThread(f"stack-{host}", self._threads)

    # -- what the daemon reads --------------------------------------------------------------

    @property
    def state(self) -> StackState:
        return self._state

    @property
    def running(self) -> bool:
        """Started and checked with a session."""
        return is_running(self._state)

    @property
    def maintenance_state(self) -> str | None:
        """'restarting' or 'rebooting' while one is due or under way (status document)."""
        return maintenance_state(self._state)

    def browser_status(self) -> tuple[str, str | None, float | None]:
        """(BrowserState, reason, next try as unix time) for the status document."""
        browser, reason, retry_at = browser_status(self._state)
        return browser, reason, (retry_at.timestamp() if retry_at is not None else None)

    def claim_budget(
        self, free: int, since_restart: int, since_boot: int, browser_busy: int = 0
    ) -> tuple[int, int]:
        """(jobs, of which browser jobs) that may be claimed now out of ``free`` slots, with
        ``browser_busy`` browser jobs in flight: the budgets, and the host's load."""
        jobs, browser = claim_budget(self._state, free, since_restart, since_boot)
        with self._lock:
            limit = self._load.limit
        return jobs, max(0, min(browser, limit - browser_busy))

    def starved(self) -> str | None:
        """Why the host is starved of CPU or memory now (consumer.browser.load), else None."""
        now = self._clock().timestamp()
        with self._lock:
            return browser_load.starved(self._load, now)

    def browser_limit(self) -> tuple[int, str | None]:
        """Browser jobs the host takes at once now, and why fewer than its capacity."""
        with self._lock:
            return self._load.limit, self._load.reason

    def next_check_s(self) -> float:
        """How soon ``step`` has something to do without being woken."""
        return next_check_s(self._state, self._clock())

    def memory_pss_bytes(self) -> int:
        """The PSS of every browser stack of the host (the running one, one retiring, one
        starting) for the metrics endpoint; never an error (a scrape must not fail because a
        browser process just exited)."""
        stacks = [stack for stack, _ in self._others()]
        return sum(self._measure(stack) for stack in stacks) + (
            self._measure() if self.running else 0
        )

    def stacks(self) -> list[BrowserStack]:
        """Every stack of the host now: the running one, then one starting or retiring."""
        return [self.stack, *(stack for stack, _ in self._others())]

    @property
    def retiring_busy(self) -> int:
        """Browser jobs still running, or still to run, on stacks an overlapped restart
        retired."""
        with self._lock:
            return sum(self._busy(pool) for _, pool in self._retiring)

    @property
    def retiring_done(self) -> int:
        """Stacks an overlapped restart retired whose last job has returned."""
        with self._lock:
            return sum(1 for _, pool in self._retiring if self._busy(pool) == 0)

    def _busy(self, pool: SessionPool) -> int:
        """Browser jobs counted on ``pool``: claimed for it (or leasing from it) and not yet
        returned (under self._lock). Once a retired pool counts none it never will again: a
        lease takes a pool it is counted on, or else the running one."""
        return sum(1 for claimed_on in self._claimed_on.values() if claimed_on is pool)

    # -- what the daemon tells --------------------------------------------------------------

    def clean_leftovers(self) -> None:
        """At consumer start: end whatever a consumer killed with SIGKILL left of its stacks."""
        killed = self.stack.stop().killed
        # The other directories', and a stack of the single-directory layout of older versions.
        legacy = self.settings.state_dir / "stack" / self.host
        for work_dir in (*self._work_dirs[1:], legacy):
            killed += self._make_stack(work_dir).stop().killed
        if killed:
            log.warning("ended %d process(es) of a previous browser stack", killed)

    def after_claim(
        self, jobs: Sequence[ClaimedJob], in_flight: int, since_restart: int, since_boot: int
    ) -> None:
        """Start the stack for the first browser job; begin the drain when a budget is spent.
        The counters are the host row's after the claim; ``in_flight`` is not needed."""
        browser = [job.id for job in jobs if job.needs_browser]
        with self._lock:
            if self._pool is not None:  # (no pool: the first stack, which starts for them)
                self._claimed_on.update((job_id, self._pool) for job_id in browser)
        self._feed(Claimed(len(browser), since_restart, since_boot))

    def step(self, busy: int, unwritten: int, browser_busy: int | None = None) -> None:
        """Main loop: notice faults, do the due maintenance once nothing runs here, try a
        failing stack again when its time has come and no browser job is in flight."""
        browser_jobs = busy if browser_busy is None else browser_busy

        def tick() -> None:
            if self._unwritten is not None:
                self._set_host_state(self._unwritten)
            self._follow_load(browser_jobs)
            retiring = self.retiring_busy, self.retiring_done
            self._carry_out(Tick(busy, unwritten, browser_jobs, *retiring))

        self._own.run(tick)

    @contextmanager
    def lease(
        self, job_id: int, isolation: Isolation, *, launch: BrowserLaunch | None = None
    ) -> Iterator[Any]:
        """The job's driver, for as long as the job runs (a job thread). StackError when the
        stack has no session to give. ``launch``: a persistent profile's browser."""
        with self._lock:
            pool = self._claimed_on.get(job_id) or self._pool
            if pool is not None:
                # Counted as the pool's until the job is done, also while its lease waits for
                # a slot: a retired stack is stopped only once no job counts on it.
                self._claimed_on[job_id] = pool
        try:
            if not self.running or pool is None:
                raise StackError(f"the browser stack of {self.host} is not running")
            extra = {} if launch is None else {"launch": launch}
            with pool.lease(isolation, **extra) as driver:
                with self._lock:
                    self._sessions[job_id] = driver
                try:
                    yield driver
                finally:
                    with self._lock:
                        self._sessions.pop(job_id, None)
        finally:
            with self._lock:
                self._claimed_on.pop(job_id, None)

    def job_returned(self, job_id: int, browser: bool, released: bool, slow: bool = False) -> None:
        """A job thread is done with its job (a job thread). ``slow``: released because a
        Grid call timed out, which lowers the host's browser limit instead of counting as a
        fault of the stack."""
        with self._lock:
            self._sessions.pop(job_id, None)
            self._claimed_on.pop(job_id, None)  # one that never leased (a bad payload)
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

    # -- carrying out -----------------------------------------------------------------------

    def _feed(self, event: Event, *, wait: bool = True) -> None:
        """``event`` to the supervisor's thread (common.runtime.serial_thread); ``wait``: until it
        and what its actions answered are carried out."""
        self._own.run(lambda: self._carry_out(event), wait=wait)

    def _carry_out(self, event: Event) -> None:
        """Step the state on ``event``, then do the actions, feeding back what they answer
        (the supervisor's thread). The lock covers the steps only: a job thread reading the
        state is never held up by a start or a stop."""
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
                before = self._measure() if measure else 0
                return _combined(self._stop_everything(), before)
            case StartNextStack():
                self._next_thread = self._in_background("next-stack", self._start_next)
            case SwitchStacks():
                self._switch()
            case StopOldStacks():
                self._retire_thread = self._in_background("retire-stack", self._stop_retired)
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
        started = self._started_stack(self.stack, warm=0)
        if isinstance(started, str):
            return StartFailed(started)
        with self._lock:
            self._pool = started
        return StartSucceeded(self._measure() if measure else 0)

    def _started_stack(self, stack: BrowserStack, warm: int) -> SessionPool | str:
        """Start ``stack`` and its pool, with ``warm`` sessions more than the one its check
        leaves warm (started in the background, as permits allow); the pool, or why the stack
        would not start."""
        # Touched well within the Grid's session-timeout, which would reap an idle session.
        keepalive_s = self.settings.grid_session_timeout_s / 3
        pool = self._make_pool(
            stack.new_driver, self.capacity, keepalive_s, self._permits, self._permit_wait_s
        )
        pool.retire_sessions_after(self.settings.browser_retire_every)
        try:
            stack.start()
            self._first_session(stack, pool)
        except Exception as exc:
            pool.close()
            stack.stop()
            error = str(exc) if isinstance(exc, StackError) else describe(exc)
            return error.strip() or type(exc).__name__
        pool.warm(warm)
        return pool

    def _first_session(self, stack: BrowserStack, pool: SessionPool) -> None:
        """Grid ready is not enough: Chromium must start and answer BiDi too. This first
        session stays in the pool, warm for the first job. A browser that dies while it starts
        (killed from outside, a hiccup of a loaded host) is tried again a few times while the
        Grid is up (or could be started again), rather than failing the whole stack for a
        back-off."""
        tries_left, rearmed = FIRST_SESSION_TRIES - 1, 0
        while True:
            try:
                with pool.lease("context"):
                    return
            except SessionStartPaused as exc:  # this process was paused: the try is re-armed
                rearmed += 1
                if rearmed > FIRST_SESSION_TRIES:
                    raise
                log.warning("the first browser session of %s: %s; trying again", self.host, exc)
                continue
            except Exception as exc:
                # A Grid that died meanwhile is started again in place, Xvfb kept; a host
                # whose stacks are stopping tries no more.
                stopping = self._permits.interrupted
                if stopping or not tries_left or not (stack.healthy() or stack.revive_grid()):
                    raise
                log.warning(
                    "the first browser session of %s failed (%s); trying again (%d more)",
                    self.host,
                    describe(exc),
                    tries_left,
                )
                tries_left -= 1

    def _start_next(self) -> None:
        """A thread: the next stack, in a work directory no running or retiring stack uses
        (the state machine starts one only when a directory is free)."""
        with self._lock:
            taken = {self.stack.work_dir, *(stack.work_dir for stack, _ in self._retiring)}
        work_dir = next((d for d in self._work_dirs if d not in taken), None)
        if work_dir is None:  # the state machine counts them too: should never happen
            self._feed(NextStackFailed("no free stack work directory"), wait=False)
            return
        stack = self._make_stack(work_dir)
        # As many sessions as the running stack's jobs needed at once, no more.
        pool = self._pool  # read once: a stop may clear it meanwhile
        in_use = pool.peak_leased if pool is not None else 1
        started = self._started_stack(stack, warm=min(in_use, self.capacity) - 1)
        if isinstance(started, str):
            self._feed(NextStackFailed(started), wait=False)
            return
        with self._lock:
            self._next = (stack, started)
        self._feed(NextStackStarted(self._measure(), self._measure(stack)), wait=False)

    def _switch(self) -> None:
        with self._lock:
            if self._next is None:  # stopped meanwhile (a close): nothing to switch to
                return
            old_stack, old_pool = self.stack, self._pool
            (self.stack, self._pool), self._next = self._next, None
            if old_pool is None:
                return
            self._retiring.append((old_stack, old_pool))
            waiting = self._busy(old_pool) - old_pool.leased
        # Its idle sessions end now, but for the jobs claimed for it that have yet to lease,
        # so that their permits go to the new stack.
        old_pool.release_idle(waiting)

    def _stop_retired(self) -> None:
        """A thread: stop the retired stacks whose last job has returned."""
        with self._lock:
            done = [(stack, pool) for stack, pool in self._retiring if self._busy(pool) == 0]
        reports = []
        for stack, pool in done:
            pool.close()
            reports.append(stack.stop())
        with self._lock:
            self._retiring = [entry for entry in self._retiring if entry not in done]
            remaining = len(self._retiring)
        self._feed(OldStacksStopped(_combined(reports), remaining), wait=False)

    def _stop_everything(self) -> list[StopReport]:
        """The running stack, a next one and retired ones: every process ended."""
        self._permits.interrupt()  # a next stack's check waiting for a session gives up
        for thread in (self._next_thread, self._retire_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join()  # bounded: a start or a stop has its own timeouts
        reports = []
        for stack, pool in [*self._others(clear=True), (self.stack, self._pool)]:
            if pool is not None:
                pool.close(wait=False)  # the stop below ends its sessions' browsers
            reports.append(stack.stop())
        with self._lock:
            self._pool = None
        # No session of those stacks is left: the next stack counts from zero.
        self._permits = SessionPermits(self.capacity)
        return reports

    def _others(self, clear: bool = False) -> list[tuple[BrowserStack, SessionPool]]:
        """The stacks other than the running one: retiring, and a next one not yet in use."""
        with self._lock:
            others = [*self._retiring, *([self._next] if self._next else [])]
            if clear:
                self._retiring, self._next = [], None
        return others

    def _in_background(self, name: str, target: Callable[[], None]) -> threading.Thread:
        """A helper thread: it does one slow thing and posts its answer."""
        return self._threads.start(f"{name}-{self.host}", target, lasting=False)

    def _follow_load(self, browser_busy: int) -> None:
        """Sample the host's load when one is due and move the browser limit by its rules;
        a move is logged, and the status document (which carries the limit) is rewritten by
        the daemon when it sees the change."""
        now = self._clock().timestamp()
        if self._sampled_at is not None and now - self._sampled_at < browser_load.SAMPLE_EVERY_S:
            return
        self._sampled_at = now
        try:
            sample = self._sample_load(now)
        except Exception as exc:  # a host that cannot be read keeps its limit
            log.debug("host %s: no load sample: %s", self.host, exc)
            return
        with self._lock:
            before = self._load.limit
            self._load = browser_load.adjust(
                browser_load.observe(self._load, sample, browser_busy), now
            )
            after, reason = self._load.limit, self._load.reason
        # INFO, not WARNING: on a CPU-bound workload the limit moves every few tens of seconds
        # by design, and the status document, host_load and the dashboard carry it.
        if after < before:
            log.info("host %s: %s", self.host, reason)
        elif after > before:
            log.info("host %s: taking %d of %d browser jobs again", self.host, after, self.capacity)

    def _note_slow(self, what: str) -> None:
        now = self._clock().timestamp()
        with self._lock:
            self._load = browser_load.note_slow(self._load, now, what)

    def _measure(self, stack: BrowserStack | None = None) -> int:
        try:
            return (stack or self.stack).memory_pss_bytes()
        except Exception:  # a process that exited while it was read
            return 0

    def _end_session(self, job_id: int) -> None:
        with self._lock:
            driver = self._sessions.pop(job_id, None)
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
