"""The consumer's browser stack over time: the I/O around consumer.stack_step.

The daemon (consumer.daemon) calls in from its main loop (``claim_budget``, ``after_claim``,
``step``, ``abandon``, ``close``) and from its job threads (``new_driver``, ``job_returned``).
Each call becomes an event for the pure ``stack_step.step``, which decides everything
(consumer.stack_states says what the states are and why); this class only carries out the
actions it returns: the stack's start, stop and health check, the reboot command, the database
records, the daemon's callbacks. Everything slow runs in the main loop's thread while no job
runs, except the first start, which the jobs that asked for it wait for.

Time comes from an injected clock (timezone-aware), the database through StackRecords and the
reboot through a callable, so that tests can drive all of it with fakes.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from scrapefleet.common.clock import utcnow
from scrapefleet.common.db import describe
from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser_stack import BrowserStack
from scrapefleet.consumer.stack_events import (
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
    RebootCommandFailed,
    RebootCommandRan,
    RunRebootCommand,
    SetHostState,
    SetStackCounter,
    StackStopped,
    StartFailed,
    StartStack,
    StartSucceeded,
    StopStack,
    Tick,
)
from scrapefleet.consumer.stack_records import StackRecords, StoreRecords
from scrapefleet.consumer.stack_states import (
    Policy,
    StackState,
    browser_status,
    claim_budget,
    is_running,
    maintenance_state,
    next_check_s,
)
from scrapefleet.consumer.stack_step import step

log = logging.getLogger(__name__)

REBOOT_COMMAND_TIMEOUT_S = 120.0

Clock = Callable[[], datetime]
RebootRunner = Callable[[str], "str | None"]  # the command -> None once it ran, else why not


def stack_work_dir(state_dir: Path, host: str) -> Path:
    """Fixed per host, so that a consumer started again finds what the last one left."""
    return state_dir / "stack" / host


def stack_policy(settings: Settings) -> Policy:
    # An empty or missing reboot_command means no reboot mechanism on this host.
    command = getattr(settings, "reboot_command", None) or None
    return Policy(
        restart_every=settings.restart_every,
        reboot_every=settings.reboot_every,
        reboot_command=command,
        retry_base_s=settings.stack_retry_base_s,
        retry_max_s=settings.stack_retry_max_s,
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
    ) -> None:
        self.settings = settings
        self.host = host
        self.stack = stack or BrowserStack(
            settings, host, capacity, stack_work_dir(settings.state_dir, host)
        )
        self.records: StackRecords = records or StoreRecords(engine, host)
        self._clock = clock
        self._reboot = reboot
        self._on_host_state = on_host_state  # the daemon's own idea of the host state
        self._on_stack_counter = on_stack_counter  # ... and of jobs_since_restart
        self._lock = threading.Lock()  # one event at a time; guards _sessions too
        self._state = StackState(stack_policy(settings))
        self._sessions: dict[int, Any] = {}  # job id -> its live driver
        self._unwritten: SetHostState | None = None  # host back to active, still to be written

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

    def claim_budget(self, free: int, since_restart: int, since_boot: int) -> tuple[int, int]:
        """(jobs, of which browser jobs) that may be claimed now out of ``free`` slots."""
        return claim_budget(self._state, free, since_restart, since_boot)

    def next_check_s(self) -> float:
        """How soon ``step`` has something to do without being woken."""
        return next_check_s(self._state, self._clock())

    def memory_pss_bytes(self) -> int:
        """The stack's PSS for the metrics endpoint: 0 while no stack runs, and never an error
        (a scrape must not fail because a browser process just exited)."""
        return self._measure() if self.running else 0

    # -- what the daemon tells --------------------------------------------------------------

    def clean_leftovers(self) -> None:
        """At consumer start: end whatever a consumer killed with SIGKILL left of its stack."""
        report = self.stack.stop()
        if report.killed:
            log.warning("ended %d process(es) of a previous browser stack", report.killed)

    def after_claim(
        self, jobs: Sequence[ClaimedJob], in_flight: int, since_restart: int, since_boot: int
    ) -> None:
        """Start the stack for the first browser job; begin the drain when a budget is spent.
        The counters are the host row's after the claim; ``in_flight`` is not needed."""
        browser_jobs = sum(1 for job in jobs if job.needs_browser)
        self._feed(Claimed(browser_jobs, since_restart, since_boot))

    def step(self, busy: int, unwritten: int, browser_busy: int | None = None) -> None:
        """Main loop: notice faults, do the due maintenance once nothing runs here, try a
        failing stack again when its time has come and no browser job is in flight."""
        if self._unwritten is not None:
            self._set_host_state(self._unwritten)
        self._feed(Tick(busy, unwritten, busy if browser_busy is None else browser_busy))

    def new_driver(self, job_id: int) -> Any:
        """The job's driver factory (a job thread)."""
        if not self.running:
            raise StackError(f"the browser stack of {self.host} is not running")
        driver = self.stack.new_driver()
        with self._lock:
            self._sessions[job_id] = driver
        return driver

    def job_returned(self, job_id: int, browser: bool, released: bool) -> None:
        """A job thread is done with its job (a job thread)."""
        with self._lock:
            self._sessions.pop(job_id, None)
        self._feed(JobReturned(job_id, browser, released))

    def abandon(self, job_id: int, browser: bool) -> None:
        """The job is past its timeout: kill its browser so that its thread returns."""
        self._feed(JobAbandoned(job_id, browser))

    def close(self) -> None:
        self._feed(Close())

    # -- carrying out -----------------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        """Step the state on ``event``, then do the actions, feeding back what they answer.
        The lock covers the steps only: job threads are never held up by a start or a stop."""
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
                report = self.stack.stop()
                return StackStopped(
                    report.killed, report.sigkilled, tuple(report.leftover_pids), before
                )
            case CheckHealth():
                return HealthChecked(self.stack.healthy())
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
        try:
            self.stack.start()
            self.stack.new_driver().quit()  # Grid ready is not enough: Chromium must start too
        except Exception as exc:
            self.stack.stop()
            error = str(exc) if isinstance(exc, StackError) else describe(exc)
            return StartFailed(error.strip() or type(exc).__name__)
        return StartSucceeded(self._measure() if measure else 0)

    def _measure(self) -> int:
        try:
            return self.stack.memory_pss_bytes()
        except Exception:  # a process that exited while it was read
            return 0

    def _end_session(self, job_id: int) -> None:
        with self._lock:
            driver = self._sessions.pop(job_id, None)
        if driver is not None:
            threading.Thread(
                target=self.stack.end_session, args=(driver,), name=f"end-session-{job_id}",
                daemon=True,
            ).start()  # fmt: skip

    def _set_host_state(self, change: SetHostState) -> None:
        moved = self.records.write(change)
        if change.to_state != "active":
            self._on_host_state(change.to_state)  # the daemon claims nothing more, at once
            return
        self._unwritten = change if moved is None else None  # retried at the next step
        if moved:  # not when an operator drained or disabled the host meanwhile
            self._on_host_state("active")
