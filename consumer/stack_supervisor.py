"""The consumer's browser stack over time: lazy start, restart and reboot budgets, faults.

The daemon (consumer.daemon) calls in from its main loop (``claim_budget``, ``after_claim``,
``step``, ``abandon``) and from its job threads (``new_driver``, ``job_returned``); everything
slow (starting, stopping, the reboot command) runs in the main loop's thread, while no job runs.

- The stack starts on the first browser job claimed, not with the consumer: a host that runs
  only noop/http_get work (CI, the demo) never needs Java, Xvfb or Chromium, and the budgets
  below, the reboot above all, only ever apply to a host that runs browsers.
- A started stack runs exactly ``restart_every`` jobs: ``claim_budget`` caps the claims, the
  host goes ``restarting`` at once (the producer assigns nothing more), the in-flight jobs
  finish, the stack is stopped and started again and checked with one real session, the host
  is ``active`` again and a host_events row keeps the figures. ``reboot_every`` is the same
  with ``rebooting`` and the reboot command; the consumer then waits to be killed by the reboot.
  The budgets count browser jobs only (the store counts them at claim time): HTTP and other
  non-browser jobs neither restart nor reboot anything, and are not capped by the budgets.
  With no ``reboot_command`` the host never reboots itself: at the reboot budget the stack is
  restarted instead, once with a host_events row and a warning saying so.
- Released browser jobs (no session, session lost) make the supervisor look at the stack: a
  Grid that is not ready, or two releases in a row, restart it. A job past its timeout has its
  browser killed; if its thread is still busy after HUNG_SESSION_GRACE_S the stack restarts.
- A stack that fails to start makes its host stop taking browser jobs and nothing else: the
  status document says ``failing`` with the reason and the next try, its queued browser jobs go
  back to pending, and the supervisor tries again by itself after ``stack_retry_base_s``,
  doubling up to ``stack_retry_max_s`` (a circuit breaker's half-open state). A reboot command
  that fails, or a host still up REBOOT_WAIT_S after it, gets a restart instead. Only an
  operator disables a host.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.constants import HUNG_SESSION_GRACE_S, REBOOT_WAIT_S
from scrapefleet.common.db import describe, transaction
from scrapefleet.common.errors import StackError
from scrapefleet.common.host_status import MAX_REASON_CHARS, BrowserState
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser_stack import BrowserStack
from scrapefleet.consumer.maintenance import claims_allowed, decide_maintenance

log = logging.getLogger(__name__)

Pending = Literal["restart", "reboot"]
RELEASES_BEFORE_RESTART = 2  # browser jobs released in a row with a stack that looks healthy
REBOOT_COMMAND_TIMEOUT_S = 120.0
MB = 1024 * 1024


def retry_delay_s(failures: int, base_s: float, max_s: float) -> float:
    """Wait before the next try of a stack that failed ``failures`` times in a row."""
    return float(min(base_s * 2 ** max(failures - 1, 0), max_s))


@dataclass(frozen=True)
class Failing:
    """A stack that would not start: why, and when it is tried again."""

    reason: str
    retry_at: float  # time.monotonic()
    retry_at_unix: float  # the same instant for the status document


def stack_work_dir(state_dir: Path, host: str) -> Path:
    """Fixed per host, so that a consumer started again finds what the last one left."""
    return state_dir / "stack" / host


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
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.host = host
        self.stack = stack or BrowserStack(
            settings, host, capacity, stack_work_dir(settings.state_dir, host)
        )
        self._on_host_state = on_host_state  # the daemon's own idea of the host state
        self._on_stack_counter = on_stack_counter  # ... and of jobs_since_restart
        self._lock = threading.Lock()  # guards the job-thread fields below
        self._sessions: dict[int, Any] = {}  # job id -> its live driver
        self._abandoned: dict[int, float] = {}  # timed-out browser job -> when its browser died
        self._releases = 0  # browser jobs released in a row
        self._look_at_stack = False
        # Main-loop fields.
        self.running = False  # started and checked with a session
        self._pending: Pending | None = None
        self._reason = ""
        self._failures = 0  # failed starts in a row
        self._failing: Failing | None = None
        self._reactivate = False  # host back to active still to be written
        self._reboot_deadline: float | None = None
        self._reboot_skip_noted = False

    # -- what the daemon asks -------------------------------------------------------------

    @property
    def maintenance_state(self) -> str | None:
        """'restarting' or 'rebooting' while one is pending or under way (status document)."""
        if self._reboot_deadline is not None or self._pending == "reboot":
            return "rebooting"
        if self._pending == "restart":
            return "restarting"
        return None

    def memory_pss_bytes(self) -> int:
        """The stack's PSS for the metrics endpoint: 0 while no stack runs, and never an error
        (a scrape must not fail because a browser process just exited)."""
        if not self.running:
            return 0
        try:
            return self.stack.memory_pss_bytes()
        except Exception:
            return 0

    def clean_leftovers(self) -> None:
        """At consumer start: end whatever a consumer killed with SIGKILL left of its stack."""
        report = self.stack.stop()
        if report.killed:
            log.warning("ended %d process(es) of a previous browser stack", report.killed)

    def browser_status(self) -> tuple[str, str | None, float | None]:
        """(BrowserState, reason, next try as unix time) for the status document."""
        if self._failing is not None:
            return BrowserState.FAILING, self._failing.reason, self._failing.retry_at_unix
        if self._pending is not None:
            return BrowserState.STARTING, None, None
        return (BrowserState.READY if self.running else BrowserState.IDLE), None, None

    @property
    def _reboot_every(self) -> int:
        """The reboot budget in force: none without a reboot command to run."""
        return self.settings.reboot_every if self.settings.reboot_command else 0

    def claim_budget(self, free: int, since_restart: int, since_boot: int) -> tuple[int, int]:
        """(jobs, of which browser jobs) that may be claimed now out of ``free`` slots. The
        budgets cap browser jobs only; a failing stack takes none."""
        if self._pending is not None or self._reboot_deadline is not None:
            return 0, 0
        if self._failing is not None:
            return free, 0
        if not self.running:  # no stack yet: no lifetime to count
            return free, free
        s = self.settings
        browser = claims_allowed(
            since_restart, since_boot, s.restart_every, self._reboot_every, free, 0
        )
        return free, browser

    def after_claim(
        self, jobs: Sequence[ClaimedJob], in_flight: int, since_restart: int, since_boot: int
    ) -> None:
        """Start the stack for the first browser job; begin the drain when a budget is spent."""
        browser_jobs = sum(1 for job in jobs if job.needs_browser)
        first_browser_job = not self.running and self._failing is None and browser_jobs
        if first_browser_job and self._start(f"first browser job of {self.host}", browser_jobs):
            since_restart = browser_jobs
        if self.running:
            s = self.settings
            due = decide_maintenance(since_restart, since_boot, s.restart_every, self._reboot_every)
            if due == "none" and self._reboot_skipped(since_boot):
                due = "restart"
            if due != "none":
                self._begin(due, f"{due} after {since_restart} browser job(s) of this stack,"
                            f" {since_boot} since boot")  # fmt: skip

    def _reboot_skipped(self, since_boot: int) -> bool:
        """The reboot budget reached with no reboot command: say so once, restart instead."""
        s = self.settings
        if s.reboot_command or s.reboot_every <= 0 or since_boot < s.reboot_every:
            return False
        if self._reboot_skip_noted:
            return False
        self._reboot_skip_noted = True
        reason = (
            f"reboot skipped after {since_boot} browser jobs since boot: no reboot_command is"
            " set, so scrapefleet never reboots this machine; the browser stack is restarted"
            " instead"
        )
        log.warning("host %s: %s", self.host, reason)
        self._write(
            lambda conn: store.record_host_event(conn, self.host, "reboot_skipped", message=reason),
            "reboot skipped event",
        )
        return True

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
            abandoned = self._abandoned.pop(job_id, None) is not None
            if not browser or abandoned:  # a killed session's error says nothing of the stack
                return
            if released:
                self._releases += 1
                self._look_at_stack = True
            else:
                self._releases = 0

    def abandon(self, job_id: int, browser: bool) -> None:
        """The job is past its timeout: kill its browser so that its thread returns."""
        if not browser:
            return
        with self._lock:
            driver = self._sessions.pop(job_id, None)
            self._abandoned[job_id] = time.monotonic()
        if driver is not None:
            threading.Thread(
                target=self.stack.end_session, args=(driver,), name=f"end-session-{job_id}",
                daemon=True,
            ).start()  # fmt: skip

    def next_check_s(self) -> float:
        """How soon ``step`` has something to do without being woken."""
        waits = [HUNG_SESSION_GRACE_S / 4]
        if self._failing is not None:
            waits.append(max(0.05, self._failing.retry_at - time.monotonic()))
        if self._reboot_deadline is not None:
            waits.append(max(0.05, self._reboot_deadline - time.monotonic()))
        return min(waits)

    def step(self, busy: int, unwritten: int, browser_busy: int | None = None) -> None:
        """Main loop: notice faults, do the pending maintenance once nothing runs here, and try
        a failing stack again when its time has come and no browser job is in flight."""
        if self._reactivate:
            self._set_active()
        if self._reboot_deadline is not None and time.monotonic() > self._reboot_deadline:
            self._reboot_deadline = None
            self._reboot_failed(f"reboot command ran {REBOOT_WAIT_S:.0f} s ago; still up")
            return
        if self._failing is not None:
            in_flight = busy if browser_busy is None else browser_busy
            if not in_flight and time.monotonic() >= self._failing.retry_at:
                self._start(f"retry after {self._failures} failed start(s)", 0)
            return
        if self._pending is None and self.running:
            self._notice_faults()
        if self._pending is None or busy or unwritten:
            return
        if self._pending == "reboot":
            self._reboot()
        else:
            self._restart()

    def close(self) -> None:
        if not self.running:  # never started, or already stopped (a failed start, a reboot)
            return
        report = self.stack.stop()
        self.running = False
        if report.leftover_pids:
            log.error("browser stack processes left at exit: %s", report.leftover_pids)

    # -- faults ----------------------------------------------------------------------------

    def _notice_faults(self) -> None:
        with self._lock:
            look, self._look_at_stack = self._look_at_stack, False
            releases = self._releases
            now = time.monotonic()
            hung = [j for j, at in self._abandoned.items() if now - at > HUNG_SESSION_GRACE_S]
        if hung:
            self._begin("restart", f"job {hung[0]}'s thread still busy after its browser ended")
        elif look and (releases >= RELEASES_BEFORE_RESTART or not self.stack.healthy()):
            self._begin("restart", f"stack fault: {releases} browser job(s) released in a row")

    # -- the maintenance --------------------------------------------------------------------

    def _begin(self, kind: str, reason: str) -> None:
        """No more claims; the host says so at once, so the producer assigns nothing more."""
        if self._pending == "reboot" or (self._pending == kind):
            return
        self._pending = "reboot" if kind == "reboot" else "restart"
        self._reason = reason
        state = self.maintenance_state or "restarting"
        log.info("host %s %s: %s", self.host, state, reason)
        self._write(
            lambda conn: store.set_host_state(
                conn, self.host, state, reason, expected=["active", "restarting"]
            ),
            f"host state {state}",
        )
        self._on_host_state(state)

    def _restart(self) -> None:
        started = time.monotonic()
        before = self.stack.memory_pss_bytes() if self.running else 0
        stopped = self.stack.stop()
        self.running = False
        with self._lock:
            self._abandoned.clear()  # what could be done for them is done
            self._releases = 0
        if stopped.leftover_pids:
            log.error("processes of the old stack survived its stop: %s", stopped.leftover_pids)
        if not self._start(self._reason, None):
            return
        after = self.stack.memory_pss_bytes()
        duration_s = round(time.monotonic() - started, 3)
        details = {
            "reason": self._reason,
            "duration_s": duration_s,
            "pss_before_bytes": before,
            "pss_after_bytes": after,
            "killed": stopped.killed,
            "sigkilled": stopped.sigkilled,
            "leftover_pids": list(stopped.leftover_pids),
        }
        self._write(
            lambda conn: store.reset_restart_counter(conn, self.host, details),
            "restart event",
        )
        self._on_stack_counter(0)
        log.info(
            "browser stack of %s restarted in %.1f s: PSS %.0f -> %.0f MB, %d process(es) ended",
            self.host,
            duration_s,
            before / MB,
            after / MB,
            stopped.killed,
        )
        self._pending = None
        self._set_active()

    def _start(self, reason: str, in_flight: int | None) -> bool:
        """Start and check with one real session; a failure makes the stack ``failing``.
        ``in_flight`` not None: a first start, whose lifetime counts the browser jobs in
        flight."""
        started = time.monotonic()
        try:
            self.stack.start()
            self.stack.new_driver().quit()  # Grid ready is not enough: Chromium must start too
        except Exception as exc:
            self.stack.stop()
            self._failed_start(exc)
            return False
        self.running = True
        if self._failing is not None:
            log.info("browser stack of %s is back after %d failed start(s)", self.host,
                     self._failures)  # fmt: skip
        self._failures = 0
        self._failing = None
        if in_flight is not None:
            details = {"reason": reason, "duration_s": round(time.monotonic() - started, 3)}
            self._write(
                lambda conn: store.begin_stack_lifetime(conn, self.host, in_flight, details),
                "stack start event",
            )
            self._on_stack_counter(in_flight)
            log.info("browser stack of %s started in %.1f s", self.host, details["duration_s"])
        return True

    def _failed_start(self, exc: Exception) -> None:
        """No browser jobs here until the next try; every other job goes on."""
        self._failures += 1
        s = self.settings
        delay_s = retry_delay_s(self._failures, s.stack_retry_base_s, s.stack_retry_max_s)
        error = describe(exc) if not isinstance(exc, StackError) else str(exc)
        first_line = error.strip().splitlines()[0] if error.strip() else type(exc).__name__
        reason = f"browser stack failed to start: {first_line}"[:MAX_REASON_CHARS]
        self._failing = Failing(reason, time.monotonic() + delay_s, time.time() + delay_s)
        log.error(
            "browser stack of %s failed to start (%d in a row; next try in %.0f s): %s",
            self.host, self._failures, delay_s, error,
        )  # fmt: skip
        details = {"failures_in_a_row": self._failures, "retry_in_s": delay_s}
        self._write(
            lambda conn: store.record_stack_failure(conn, self.host, reason, details),
            "stack failure",
        )
        if self._pending is not None:  # a restart that could not start the new stack
            self._pending = None
            self._set_active()

    def _reboot_failed(self, reason: str) -> None:
        """The reboot did not happen: say so, and restart the stack instead of rebooting."""
        log.error("host %s: reboot failed (%s); restarting the browser stack instead",
                  self.host, reason)  # fmt: skip
        self._write(
            lambda conn: store.record_host_event(conn, self.host, "reboot_failed", message=reason),
            "reboot failure",
        )
        self._pending = "restart"
        self._reason = f"reboot failed: {reason}"
        self._restart()

    def _reboot(self) -> None:
        stopped = self.stack.stop()  # a clean end before the kernel's
        self.running = False
        reason = f"{self._reason}; {stopped.killed} stack process(es) ended"
        self._write(
            lambda conn: store.record_reboot_request(conn, self.host, reason), "reboot event"
        )
        command = self.settings.reboot_command or ""  # set: _reboot_every is 0 without one
        log.warning("host %s rebooting: running %r", self.host, command)
        try:
            done = subprocess.run(
                shlex.split(command),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=REBOOT_COMMAND_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._reboot_failed(f"reboot command {command!r} could not run: {exc}")
            return
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace").strip()[-300:]
            self._reboot_failed(f"reboot command {command!r} exited {done.returncode}: {stderr}")
            return
        self._pending = None
        self._reboot_deadline = time.monotonic() + REBOOT_WAIT_S  # claims stay off until then

    def _set_active(self) -> None:
        moved: list[bool] = []
        self._reactivate = not self._write(
            lambda conn: moved.append(
                store.set_host_state(
                    conn,
                    self.host,
                    "active",
                    "browser stack ready",
                    expected=["restarting", "rebooting"],
                )
            ),
            "host state active",
        )
        if moved == [True]:  # not when an operator drained or disabled the host meanwhile
            self._on_host_state("active")

    def _write(self, change: Callable[[Connection], object], what: str) -> bool:
        """One transaction; a database away costs the record, never a second restart."""
        try:
            with transaction(self.engine) as conn:
                change(conn)
        except Exception as exc:
            log.warning("could not record %s for %s: %s", what, self.host, describe(exc))
            return False
        return True
