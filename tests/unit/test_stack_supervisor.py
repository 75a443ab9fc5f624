"""The stack supervisor (the I/O shell around consumer.browser.supervisor.step) driven the way the
daemon drives it, with a fake stack, a fake clock, fake database records and a fake reboot.

Nothing here starts a process or opens a connection: the supervisor's every outside effect goes
through the fakes, so each test reads what it did from them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common.constants import HUNG_SESSION_GRACE_S, REBOOT_WAIT_S
from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings
from scrapefleet.common.status.document import BrowserState
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.stack.browser_stack import (
    SessionStartPaused,
    StackHealth,
    StopReport,
)
from scrapefleet.consumer.browser.stack.launch import FIRST_SESSION_TRIES
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    Record,
    RecordHostEvent,
    RecordRebootRequest,
    RecordRestart,
    RecordStackFailure,
    RecordStackRetired,
    RecordStackStart,
    RecordStackSwitch,
    SetHostState,
)
from scrapefleet.consumer.browser.supervisor.load_rules import LoadSample
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(20)

CAPACITY = 6
MB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeDriver:
    def quit(self) -> None:
        pass


class FakePool:
    """A session per lease from the stack's ``new_driver``, quit after it."""

    def __init__(self, make_driver: Callable[[], Any], size: int, *_: Any) -> None:
        self.make_driver = make_driver
        self.closed = False
        self.leased = 0
        self.peak_leased = 0
        self.warmed: list[int] = []  # each warm() asked for
        # Set: a lease waits for it before it takes a slot, as a real one waits for a session
        # being prepared; ``at_gate`` says one is waiting.
        self.gate: threading.Event | None = None
        self.at_gate = threading.Event()
        self.retire_after_jobs = 0

    def retire_sessions_after(self, jobs: int) -> None:
        self.retire_after_jobs = jobs

    @contextlib.contextmanager
    def lease(self, isolation: str = "context") -> Iterator[Any]:
        if self.gate is not None:
            self.at_gate.set()
            self.gate.wait(10)
        if self.closed:
            raise StackError("the browser session pool is closed")
        driver = self.make_driver()
        self.leased += 1
        self.peak_leased = max(self.peak_leased, self.leased)
        try:
            yield driver
        finally:
            self.leased -= 1
            driver.quit()

    def warm(self, count: int) -> int:
        self.warmed.append(count)
        return 0

    def release_idle(self, keep: int) -> int:
        return 0

    def close(self, wait: bool = True) -> None:
        self.closed = True


class FakeStack:
    """Starts and stops at once; ``failing_starts`` of the next starts raise."""

    def __init__(self, work_dir: Path = Path("a"), failing_starts: int = 0) -> None:
        self.work_dir = work_dir
        self.up = False
        self.starts = 0
        self.failing_starts = failing_starts
        self.grid_ready = True
        self.grid_slow = False  # up, but its status answers come too late
        self.ended: list[Any] = []
        self.drivers = 0
        self.dying_browsers = 0  # the next sessions whose browser dies as it starts
        self.threads: list[str] = []  # the threads that started and stopped it
        self.paused_sessions = 0  # the next session starts lost to a pause of the consumer
        self.start_gate: threading.Event | None = None  # set: its start waits for it

    def start(self) -> None:
        self.threads.append(threading.current_thread().name)
        if self.start_gate is not None:
            self.start_gate.wait(10)
        self.starts += 1
        if self.failing_starts:
            self.failing_starts -= 1
            raise StackError("java: not found")
        self.up = True

    def stop(self) -> StopReport:
        self.threads.append(threading.current_thread().name)
        killed, self.up = (4 if self.up else 0), False
        return StopReport(duration_s=0.1, killed=killed, sigkilled=0, leftover_pids=())

    def new_driver(self) -> FakeDriver:
        if not self.up:
            raise StackError("no Grid")
        if self.dying_browsers:
            self.dying_browsers -= 1
            raise StackError("chrome not reachable")
        if self.paused_sessions:
            self.paused_sessions -= 1
            raise SessionStartPaused("no browser session: read timed out (consumer paused)")
        self.drivers += 1
        return FakeDriver()

    def healthy(self) -> bool:
        return self.up and self.grid_ready

    def revive_grid(self) -> bool:
        return False  # the real one: tests/browser/test_grid_restart.py

    def health(self) -> StackHealth:
        if self.up and self.grid_slow:
            return StackHealth.SLOW
        return StackHealth.UP if self.healthy() else StackHealth.DOWN

    def memory_pss_bytes(self) -> int:
        return 200 * MB if self.up else 0

    def end_session(self, driver: Any) -> int:
        self.ended.append(driver)
        return 1


class FakeRecords:
    """The host row's state as the store would keep it, and every record written."""

    def __init__(self) -> None:
        self.host_state = "active"
        self.written: list[Record] = []
        self.away = False

    def write(self, record: Record) -> bool | None:
        if self.away:
            return None
        self.written.append(record)
        if isinstance(record, SetHostState):
            if self.host_state not in record.expected:
                return False
            self.host_state = record.to_state
        return True

    def of(self, kind: type) -> list[Any]:
        return [r for r in self.written if isinstance(r, kind)]


class Host:
    """The daemon's side: claims under the supervisor's budget, counts browser jobs at claim
    time as the store does, runs each batch to its end, then lets the supervisor step."""

    def __init__(self, **settings: Any) -> None:
        values = {
            "restart_every": 20,
            "reboot_every": 80,
            "reboot_command": "reboot-now",
            "overlap_restarts": False,  # the draining restart; overlapped ones have tests below
        }
        # As many cores as slots, unless a test says: the browser limit starts at capacity.
        self.cores: int = settings.pop("cores", CAPACITY)
        values.update(settings)
        command = values.pop("reboot_command")
        # model_copy skips validation: an empty command is what an old settings file may hold.
        self.settings = Settings(**values).model_copy(update={"reboot_command": command})
        self.clock = FakeClock()
        self.stacks: list[FakeStack] = []  # every stack made, in order
        self.pools: list[FakePool] = []  # and their pools
        self.next_failures = 0  # failed starts of each next stack made
        self.next_start_gate: threading.Event | None = None  # each next stack's start waits
        self.records = FakeRecords()
        self.reboots: list[str] = []
        self.reboot_failure: str | None = None
        self.cpu_pressure = 0.05  # what the host's load samples say
        self.told: list[str] = []  # host states the supervisor told the daemon
        self.since_restart = self.since_boot = 0
        self.in_flight: list[ClaimedJob] = []
        self.jobs_per_stack: Counter[int] = Counter()  # browser jobs run by each stack started
        self._ids = itertools.count(1)
        self.supervisor = StackSupervisor(
            self.settings,
            None,  # type: ignore[arg-type]  # never used: the records are fakes
            "h1",
            CAPACITY,
            on_host_state=self.told.append,
            on_stack_counter=self._set_since_restart,
            clock=self.clock,
            records=self.records,
            reboot=self._reboot,
            make_pool=self._new_pool,  # type: ignore[arg-type]
            make_stack=self._new_stack,  # type: ignore[arg-type]
            sample_load=self._sample_load,
            cores=self.cores,
        )
        self.stack = self.stacks[0]
        self.supervisor.start()  # its actions on its own thread, as in the daemon

    def _new_pool(self, make_driver: Callable[[], Any], size: int, *rest: Any) -> FakePool:
        pool = FakePool(make_driver, size, *rest)
        self.pools.append(pool)
        return pool

    def _new_stack(self, work_dir: Path) -> FakeStack:
        stack = FakeStack(work_dir, self.next_failures)
        stack.start_gate = self.next_start_gate
        self.stacks.append(stack)
        return stack

    def _set_since_restart(self, count: int) -> None:
        self.since_restart = count

    def _sample_load(self, at: float) -> LoadSample:
        return LoadSample(at, self.cpu_pressure, cpu_busy=0.5, memory_available=0.5)

    def _reboot(self, command: str) -> str | None:
        self.reboots.append(command)
        return self.reboot_failure

    def claim(self, browser: int, other: int = 0) -> int:
        """Claim up to ``browser`` browser jobs and ``other`` others; the browser jobs claimed."""
        free = CAPACITY - len(self.in_flight)
        busy = sum(1 for job in self.in_flight if job.needs_browser)
        free, browser_free = self.supervisor.claim_budget(
            free, self.since_restart, self.since_boot, busy
        )
        took = min(browser, browser_free, free)
        jobs = [self._job(True) for _ in range(took)]
        jobs += [self._job(False) for _ in range(min(other, free - took))]
        self.since_restart += took
        self.since_boot += took
        self.in_flight += jobs
        if jobs:
            self.supervisor.after_claim(
                jobs, len(self.in_flight), self.since_restart, self.since_boot
            )
        return took

    def finish(self, released: bool = False, slow: bool = False) -> None:
        """Every job in flight runs and returns (a browser job asks for a session first);
        ``slow``: a release is for a Grid call that timed out."""
        for job in self.in_flight:
            outcome = released
            if job.needs_browser:
                try:
                    with self.supervisor.lease(job.id, "context"):
                        self.jobs_per_stack[self.stack.starts] += 1
                except StackError:
                    outcome = True  # no session: the job is handed back
            self.supervisor.job_returned(
                job.id, job.needs_browser, released=outcome, slow=slow and outcome
            )
        self.in_flight = []
        self.tick()

    def tick(self) -> None:
        browser_busy = sum(1 for job in self.in_flight if job.needs_browser)
        self.supervisor.step(len(self.in_flight), 0, browser_busy)

    def run_browser_jobs(self, count: int) -> None:
        done = 0
        for _ in range(10 * count):
            if done == count:
                return
            done += self.claim(min(CAPACITY, count - done))
            self.finish()
        raise AssertionError(f"only {done} of {count} browser jobs could be claimed")

    def _job(self, browser: bool) -> ClaimedJob:
        kind = "fetch_page" if browser else "http_get"
        return ClaimedJob(next(self._ids), kind, {}, 1, 3, None, needs_browser=browser)


def test_starts_and_stops_run_on_the_supervisors_own_thread_whoever_posts() -> None:
    host = Host(restart_every=2, reboot_every=0)
    host.claim(browser=2)  # the first start, for these jobs
    returning = threading.Thread(target=host.finish, name="job-thread")  # a draining restart
    returning.start()
    returning.join(5)
    host.run_browser_jobs(1)
    host.supervisor.close()
    assert host.stack.starts == 2 and not host.stack.up
    assert set(host.stack.threads) == {"stack-h1"}, host.stack.threads


def test_the_stack_starts_on_the_first_browser_job_only() -> None:
    host = Host()
    host.claim(browser=0, other=6)
    host.finish()
    assert host.stack.starts == 0 and not host.supervisor.running
    assert host.supervisor.browser_status() == (BrowserState.IDLE, None, None)
    with pytest.raises(StackError), host.supervisor.lease(99, "context"):
        pass

    host.clock.advance(1)
    assert host.claim(browser=2, other=1) == 2
    assert host.stack.starts == 1 and host.supervisor.running
    [start] = host.records.of(RecordStackStart)
    assert start.jobs_in_flight == 2 and host.since_restart == 2
    assert host.supervisor.browser_status() == (BrowserState.READY, None, None)


@pytest.mark.parametrize("every", [5, 20])
def test_each_stack_runs_exactly_restart_every_browser_jobs(every: int) -> None:
    host = Host(restart_every=every, reboot_every=0)
    host.run_browser_jobs(2 * every + 3)
    assert dict(host.jobs_per_stack) == {1: every, 2: every, 3: 3}
    restarts = host.records.of(RecordRestart)
    assert len(restarts) == 2
    assert restarts[0].details["pss_before_bytes"] == 200 * MB
    assert restarts[0].details["killed"] == 4
    assert host.told == ["restarting", "active", "restarting", "active"]
    assert host.records.host_state == "active" and host.reboots == []


def test_other_jobs_never_restart_the_stack() -> None:
    host = Host(restart_every=5, reboot_every=10)
    host.run_browser_jobs(1)
    for n in range(20):
        host.claim(browser=0, other=6)
        host.finish(released=n % 2 == 0)  # nor do their faults (an HTTP job handed back)
    assert host.stack.starts == 1 and host.records.of(RecordRestart) == []


def test_the_reboot_budget_runs_the_reboot_command_then_waits_to_go_down() -> None:
    host = Host(restart_every=0, reboot_every=8)
    host.run_browser_jobs(8)
    assert host.reboots == ["reboot-now"]
    assert host.records.host_state == "rebooting" and host.told == ["rebooting"]
    assert host.supervisor.maintenance_state == "rebooting"
    [request] = host.records.of(RecordRebootRequest)
    assert "8 since boot" in request.reason
    assert not host.stack.up and host.claim(browser=6, other=6) == 0
    assert host.supervisor.claim_budget(6, 0, 8) == (0, 0)  # nothing at all: going down
    assert host.supervisor.next_check_s() <= HUNG_SESSION_GRACE_S / 4


def test_a_host_still_up_after_the_reboot_wait_restarts_its_stack_and_stays_in_the_fleet() -> None:
    host = Host(restart_every=0, reboot_every=8)
    host.run_browser_jobs(8)
    host.clock.advance(REBOOT_WAIT_S - 1)
    host.tick()
    assert host.stack.starts == 1 and host.records.of(RecordHostEvent) == []

    host.clock.advance(2)
    host.tick()
    [failed] = host.records.of(RecordHostEvent)
    assert failed.event == "reboot_failed" and "still up" in failed.message
    assert host.stack.starts == 2 and host.supervisor.running
    assert host.records.host_state == "active" and host.told[-1] == "active"
    assert "disabled" not in host.told
    host.run_browser_jobs(8)  # browser jobs again, and a new try a budget later
    assert host.reboots == ["reboot-now", "reboot-now"]


def test_a_reboot_command_that_fails_restarts_the_stack_instead() -> None:
    host = Host(restart_every=0, reboot_every=4)
    host.reboot_failure = "reboot command 'reboot-now' exited 1: not allowed"
    host.run_browser_jobs(4)
    assert host.reboots == ["reboot-now"]
    [failed] = host.records.of(RecordHostEvent)
    assert (failed.event, failed.message) == ("reboot_failed", host.reboot_failure)
    assert host.supervisor.running and host.records.host_state == "active"


@pytest.mark.parametrize("command", [None, ""])
def test_without_a_reboot_command_the_host_restarts_its_stack_instead_and_warns_once(
    command: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "scrapefleet.consumer.browser.supervisor.stack_supervisor")
    host = Host(restart_every=0, reboot_every=8, reboot_command=command)
    host.run_browser_jobs(8)
    assert host.reboots == []
    [skipped] = host.records.of(RecordHostEvent)
    assert skipped.event == "reboot_skipped" and "no reboot_command" in skipped.message
    assert len(host.records.of(RecordRestart)) == 1 and host.supervisor.running
    assert host.records.host_state == "active"

    host.run_browser_jobs(16)
    assert [e.event for e in host.records.of(RecordHostEvent)] == ["reboot_skipped"] * 3
    assert dict(host.jobs_per_stack) == {1: 8, 2: 8, 3: 8}
    warnings = [r for r in caplog.records if "reboot skipped" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_a_stack_that_will_not_start_backs_off_and_recovers_by_itself() -> None:
    host = Host(stack_retry_base_s=10.0, stack_retry_max_s=30.0)
    host.stack.failing_starts = 4
    host.claim(browser=1)
    host.finish()  # no session: the job is handed back
    waits: list[float] = []
    for failures in range(1, 5):
        browser, reason, retry_at = host.supervisor.browser_status()
        assert browser == BrowserState.FAILING and reason is not None
        assert "java: not found" in reason
        assert retry_at is not None
        waits.append(retry_at - host.clock().timestamp())
        assert len(host.records.of(RecordStackFailure)) == failures
        # Browser jobs stop here, nothing else does; the host is never disabled.
        assert host.supervisor.claim_budget(6, 0, 1) == (6, 0)
        assert host.claim(browser=3, other=2) == 0 and len(host.in_flight) == 2
        host.finish()
        assert host.records.host_state == "active" and host.told == []
        assert host.stack.starts == failures  # not before its time
        host.clock.advance(waits[-1])
        host.tick()
    assert waits == [10.0, 20.0, 30.0, 30.0]  # doubling, capped
    assert host.stack.starts == 5 and host.supervisor.running
    assert host.supervisor.browser_status() == (BrowserState.READY, None, None)
    assert host.records.of(RecordStackStart)[-1].jobs_in_flight == 0


def test_a_browser_that_dies_while_the_stack_starts_is_tried_again_not_the_stack_failed() -> None:
    host = Host()
    host.stack.dying_browsers = FIRST_SESSION_TRIES - 1
    host.claim(browser=1)
    assert host.supervisor.running and not host.records.of(RecordStackFailure)
    assert host.stack.starts == 1  # the Grid was not restarted for it
    host.finish()
    # One more death than the tries: the start fails as before (a back-off, then a retry).
    other = Host()
    other.stack.dying_browsers = FIRST_SESSION_TRIES
    other.claim(browser=1)
    assert len(other.records.of(RecordStackFailure)) == 1


def test_a_first_session_lost_to_a_pause_of_the_consumer_is_not_counted_as_a_try() -> None:
    host = Host()
    host.stack.paused_sessions = FIRST_SESSION_TRIES
    host.stack.dying_browsers = FIRST_SESSION_TRIES - 1
    host.claim(browser=1)
    assert host.supervisor.running and not host.records.of(RecordStackFailure)
    assert host.stack.starts == 1


def test_a_failing_stack_is_not_retried_while_a_browser_job_is_in_flight() -> None:
    host = Host(stack_retry_base_s=10.0)
    host.stack.failing_starts = 1
    host.claim(browser=2)  # the start fails with both jobs in flight
    host.clock.advance(60)
    host.tick()
    assert host.stack.starts == 1
    host.finish()  # both handed back: no session
    assert host.stack.starts == 2 and host.supervisor.running
    host.tick()  # the releases while it failed say nothing of the new stack
    assert host.stack.starts == 2 and host.records.of(RecordRestart) == []


def test_browser_jobs_released_in_a_row_restart_the_stack() -> None:
    host = Host(restart_every=0, reboot_every=0)
    host.claim(browser=1)
    host.finish(released=True)
    assert host.stack.starts == 1  # one release, Grid ready: no restart
    host.claim(browser=2)
    host.finish(released=True)
    assert host.stack.starts == 2
    [restart] = host.records.of(RecordRestart)
    assert "stack fault" in restart.reason and "released in a row" in restart.reason


def test_a_release_with_the_grid_down_restarts_the_stack() -> None:
    host = Host(restart_every=0, reboot_every=0)
    host.claim(browser=1)
    host.stack.grid_ready = False
    host.finish(released=True)
    host.tick()  # the fault seen last step, acted on in this one
    assert host.stack.starts == 2 and "Grid not ready" in host.records.of(RecordRestart)[0].reason


def test_a_release_with_a_slow_grid_is_no_fault_and_the_host_takes_fewer_browser_jobs() -> None:
    host = Host(restart_every=0, reboot_every=0)
    host.claim(browser=1)
    host.stack.grid_slow = True  # up, but its status answer came too late
    host.finish(released=True)  # not for a timeout: the stack's health is checked
    host.clock.advance(2)
    host.tick()
    assert host.stack.starts == 1 and host.records.of(RecordRestart) == []
    limit, reason = host.supervisor.browser_limit()
    assert limit == CAPACITY - 1 and reason is not None and "answered its status late" in reason
    assert host.claim(browser=6) == CAPACITY - 1


def test_browser_jobs_released_for_timeouts_are_no_fault_however_many() -> None:
    host = Host(restart_every=0, reboot_every=0)
    for _ in range(3):
        host.claim(browser=6)
        host.finish(released=True, slow=True)
        host.clock.advance(11)  # the limit moves at most every 10 s
        host.tick()
    assert host.stack.starts == 1 and host.records.of(RecordRestart) == []
    limit, reason = host.supervisor.browser_limit()
    assert limit == CAPACITY - 3 and reason is not None and "timed out" in reason


def test_the_limit_starts_at_a_job_per_core_climbs_while_calm_and_falls_under_cpu_pressure() -> (
    None
):
    host = Host(restart_every=0, reboot_every=0, cores=2)
    assert host.supervisor.browser_limit()[0] == 2  # it starts at a job per core
    assert host.claim(browser=6) == 2
    host.finish()
    for _ in range(80):  # calm, and every slot the limit allows in use: one more every 10 s
        host.claim(browser=6)
        host.clock.advance(1)
        host.tick()
        host.finish()
    assert host.supervisor.browser_limit() == (CAPACITY, None)
    host.cpu_pressure = 0.95
    for _ in range(80):  # a sample a second: the limit steps down every 10 s, to the floor
        host.clock.advance(1)
        host.tick()
    limit, reason = host.supervisor.browser_limit()
    assert limit == 2 and reason is not None and "CPU pressure 95%" in reason


def test_a_hung_job_gets_its_browser_killed_then_the_stack_restarts_after_the_grace() -> None:
    host = Host(restart_every=0, reboot_every=0)
    host.claim(browser=1)
    [job] = host.in_flight
    held = contextlib.ExitStack()
    driver = held.enter_context(host.supervisor.lease(job.id, "context"))
    host.in_flight = []  # timed out: the daemon counts its thread as stuck, not in flight
    host.supervisor.abandon(job.id, browser=True)
    wait_for(lambda: host.stack.ended == [driver], 5, "the hung job's browser killed")
    host.clock.advance(HUNG_SESSION_GRACE_S)
    host.tick()
    assert host.stack.starts == 1
    host.clock.advance(1)
    host.tick()
    assert host.stack.starts == 2
    assert "still busy" in host.records.of(RecordRestart)[0].reason
    held.close()  # the hung thread returns at last


def test_the_host_goes_back_to_active_once_the_database_answers_again() -> None:
    host = Host(restart_every=2, reboot_every=0)
    host.claim(browser=2)
    host.records.away = True
    host.finish()
    assert host.stack.starts == 2 and host.told == ["restarting"]  # restarted all the same
    host.tick()
    assert host.told == ["restarting"]
    host.records.away = False
    host.tick()
    assert host.told == ["restarting", "active"] and host.records.host_state == "active"


def test_an_operator_state_set_during_a_restart_is_kept() -> None:
    host = Host(restart_every=2, reboot_every=0)
    host.claim(browser=2)
    host.records.host_state = "draining"  # an operator drained the host meanwhile
    host.finish()
    assert host.supervisor.running and host.records.host_state == "draining"
    assert host.told[-1] != "active"


def test_close_stops_a_running_stack() -> None:
    host = Host()
    host.claim(browser=1)
    host.finish()
    host.supervisor.close()
    assert not host.stack.up and not host.supervisor.running
    assert host.supervisor.memory_pss_bytes() == 0


# -- overlapped restarts --------------------------------------------------------------------


def run_overlapped(host: Host, count: int) -> None:
    """``count`` browser jobs, a second apart, waiting (real time: the next stack starts in a
    thread) whenever the supervisor holds claims back."""
    done = 0
    while done < count:
        took = host.claim(min(CAPACITY, count - done))
        if not took:
            wait_for(
                lambda: host.supervisor.claim_budget(CAPACITY, host.since_restart, host.since_boot)[
                    1
                ],
                5,
                "browser claims allowed again",
            )
        done += took
        host.finish()
        host.clock.advance(1)  # a claim rate: the next stack starts by the job count alone


def test_an_overlapped_restart_switches_stacks_at_the_budget_and_never_drains() -> None:
    host = Host(overlap_restarts=True, restart_every=20, reboot_every=0)
    run_overlapped(host, 45)
    wait_for(lambda: len(host.records.of(RecordStackRetired)) == 2, 5, "two stacks retired")

    assert [s.work_dir.name for s in host.stacks] == ["a", "b", "a"]
    assert host.supervisor.stack is host.stacks[2]
    # Each stack: its check session, then exactly its budget's jobs (those of the claim that
    # spent it too, though they lease after the switch).
    assert [s.drivers for s in host.stacks] == [21, 21, 6]
    assert [s.up for s in host.stacks] == [False, False, True]
    switches = host.records.of(RecordStackSwitch)
    assert len(switches) == 2 and all(sw.details["overlapped"] for sw in switches)
    assert all(r.details["killed"] == 4 for r in host.records.of(RecordStackRetired))
    assert host.records.of(RecordRestart) == [] and host.told == []  # never "restarting"
    assert host.since_restart == 5


def test_the_retired_stack_stops_only_after_its_last_job() -> None:
    host = Host(overlap_restarts=True, restart_every=12, reboot_every=0)
    run_overlapped(host, 6)
    wait_for(lambda: len(host.stacks) == 2 and host.stacks[1].up, 5, "the next stack up")
    assert host.claim(6) == 6  # the budget spent with six jobs in flight on the old stack
    old, new = host.stacks
    assert host.supervisor.stack is new and host.supervisor.retiring_busy == 6
    held = contextlib.ExitStack()
    for job in host.in_flight[:5]:  # five lease now; the sixth has yet to
        held.enter_context(host.supervisor.lease(job.id, "context"))
    assert (old.drivers, new.drivers) == (12, 1)  # claimed before the switch: the old stack
    host.tick()
    assert old.up and host.supervisor.retiring_busy == 6

    with host.supervisor.lease(host.in_flight[5].id, "context"):
        assert old.drivers == 13
    held.close()
    host.supervisor.job_returned(host.in_flight[5].id, browser=True, released=False)
    host.tick()
    wait_for(lambda: not old.up, 5, "the retired stack stopped after its last job")
    [retired] = host.records.of(RecordStackRetired)
    assert retired.details["killed"] == 4 and retired.details["leftover_pids"] == []
    host.in_flight = []
    assert new.up and host.claim(6) == 6
    host.finish()
    assert (old.drivers, new.drivers) == (13, 7)  # claims after the switch: the new stack


def test_a_retired_stack_is_not_stopped_under_a_lease_still_waiting_for_its_session() -> None:
    host = Host(overlap_restarts=True, restart_every=12, reboot_every=0)
    run_overlapped(host, 6)
    wait_for(lambda: len(host.stacks) == 2 and host.stacks[1].up, 5, "the next stack up")
    assert host.claim(6) == 6  # the budget spent: these six run on the old stack
    old, _new = host.stacks
    old_pool = host.pools[0]
    for job in host.in_flight[:5]:
        with host.supervisor.lease(job.id, "context"):
            pass
        host.supervisor.job_returned(job.id, browser=True, released=False)
    last = host.in_flight[5]
    old_pool.gate = threading.Event()
    outcome: list[str] = []

    def run_last() -> None:
        try:
            with host.supervisor.lease(last.id, "context"):
                outcome.append("ran on the old stack" if old.up else "ran on a stopped stack")
        except StackError as exc:
            outcome.append(f"released: {exc}")

    leasing = threading.Thread(target=run_last)
    leasing.start()
    assert old_pool.at_gate.wait(5), "the last lease never reached the old pool"
    host.tick()  # the retired stack is stopped once no job counts on it
    assert host.supervisor.retiring_busy == 1 and old.up and not old_pool.closed
    old_pool.gate.set()
    leasing.join(5)
    assert outcome == ["ran on the old stack"]
    host.supervisor.job_returned(last.id, browser=True, released=False)
    host.in_flight = []
    host.tick()
    wait_for(lambda: not old.up, 5, "the retired stack stopped after its last job")


def test_a_next_stack_that_fails_to_start_makes_the_restart_a_draining_one() -> None:
    host = Host(overlap_restarts=True, restart_every=8, reboot_every=0)
    host.next_failures = 1
    host.run_browser_jobs(9)
    [restart] = host.records.of(RecordRestart)
    assert "next stack failed" in restart.reason and "java: not found" in restart.reason
    assert host.told == ["restarting", "active"] and host.stacks[0].starts == 2


def test_the_next_stack_starts_early_enough_for_the_last_start_time_at_the_claim_rate() -> None:
    host = Host(overlap_restarts=True, restart_every=40, reboot_every=0)
    host.claim(6)
    host.finish()
    host.clock.advance(1)
    assert len(host.stacks) == 1
    # The first start took no time on the fake clock; say it took 20 s, as on a loaded host.
    host.supervisor._state = replace(host.supervisor.state, start_s=20.0)
    # 6 jobs a second: 28 jobs left are ~5 s away, within twice a 20 s start.
    host.claim(6)
    wait_for(lambda: len(host.stacks) == 2, 5, "the next stack started")


def test_sessions_start_as_jobs_need_them_and_a_restart_warms_as_many_as_were_used() -> None:
    host = Host(overlap_restarts=True, restart_every=12, reboot_every=0)
    assert host.claim(3) == 3
    with contextlib.ExitStack() as held:  # three jobs at once on the first stack
        for job in host.in_flight:
            held.enter_context(host.supervisor.lease(job.id, "context"))
    for job in host.in_flight:
        host.supervisor.job_returned(job.id, browser=True, released=False)
    host.in_flight = []
    run_overlapped(host, 9)
    wait_for(lambda: len(host.pools) == 2, 5, "the next stack's pool")
    first, following = host.pools
    assert first.warmed == [0]  # its check's session only: the rest as jobs come
    assert following.warmed == [2]  # its check's session and two more: three were in use


def _helper_gone(name: str) -> bool:
    return not any(thread.name == name for thread in threading.enumerate())


def test_a_next_stack_is_the_hosts_only_once_the_supervisors_thread_takes_it() -> None:
    """The next-stack helper changes nothing of the supervisor's: it posts what it started,
    and the supervisor's own thread makes it the host's next stack."""
    host = Host(overlap_restarts=True, restart_every=12, reboot_every=0)
    host.next_start_gate = threading.Event()
    assert host.claim(6) == 6  # the budget within the lead: the next stack starts, held
    wait_for(lambda: len(host.stacks) == 2, 5, "the next stack made")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(10)

    host.supervisor._own.run(hold, wait=False)  # the supervisor's thread, busy
    assert held.wait(5)
    host.next_start_gate.set()
    wait_for(lambda: _helper_gone("next-stack-h1"), 5, "the next-stack helper done")
    assert host.stacks[1].up and host.supervisor.stacks() == [host.stacks[0]]
    release.set()
    wait_for(lambda: host.supervisor.stacks() == host.stacks, 5, "the next stack the host's")
    host.finish()
    host.supervisor.close()
    assert not any(stack.up for stack in host.stacks)


def test_a_close_while_the_next_stack_starts_stops_that_one_too() -> None:
    """The stop joins the helper and takes the stack it started, though the helper's posted
    answer has yet to get its turn on the supervisor's thread."""
    host = Host(overlap_restarts=True, restart_every=12, reboot_every=0)
    host.next_start_gate = threading.Event()
    assert host.claim(6) == 6
    host.finish()
    wait_for(lambda: len(host.stacks) == 2, 5, "the next stack made")
    closing = threading.Thread(target=host.supervisor.close)
    closing.start()
    # The close's stop interrupts the session permits, then waits for the helper.
    wait_for(lambda: host.supervisor._permits.interrupted, 5, "the stop under way")
    host.next_start_gate.set()
    closing.join(5)
    assert not closing.is_alive()
    assert host.stacks[1].starts == 1 and not host.stacks[1].up and host.pools[1].closed
    assert not host.stacks[0].up
