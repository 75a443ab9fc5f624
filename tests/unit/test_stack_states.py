"""The browser stack's state machine, step by step: plain values in, plain values out.

No stack, no database, no clock: each event is given its own ``now``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest

from scrapefleet.common.constants import HUNG_SESSION_GRACE_S
from scrapefleet.common.settings import setting_default
from scrapefleet.common.status.document import BrowserState
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    SET_ACTIVE,
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
    RecordHostEvent,
    RecordRebootRequest,
    RecordRestart,
    RecordStackFailure,
    RecordStackRetired,
    RecordStackStart,
    RecordStackSwitch,
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
from scrapefleet.consumer.browser.supervisor.states import (
    AwaitingReboot,
    Closed,
    Draining,
    Failing,
    Idle,
    Kind,
    NextStack,
    Policy,
    Ready,
    Rebooting,
    Replacing,
    Retiring,
    StackState,
    StartCause,
    Starting,
    Stopping,
    browser_status,
    claim_budget,
    is_running,
    maintenance_state,
    next_check_s,
)
from scrapefleet.consumer.browser.supervisor.step import step

pytestmark = pytest.mark.timeout(10)

STACK_RETRY_BASE_S = setting_default("stack_retry_base_s")
STACK_RETRY_MAX_S = setting_default("stack_retry_max_s")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = Policy(
    restart_every=20,
    reboot_every=80,
    reboot_command="reboot-now",
    retry_base_s=STACK_RETRY_BASE_S,
    retry_max_s=STACK_RETRY_MAX_S,
)
IDLE_TICK = Tick(busy=0, unwritten=0, browser_busy=0)
A = TypeVar("A")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def feed(state: StackState, *events: Event, now: datetime = T0) -> tuple[StackState, list[Action]]:
    actions: list[Action] = []
    for event in events:
        state, done = step(state, event, now)
        actions += done
    return state, actions


def ready(policy: Policy = POLICY, since_boot: int = 0) -> StackState:
    """A stack started by the first browser job, nothing due."""
    state, _ = feed(StackState(policy), Claimed(1, 1, since_boot), StartSucceeded())
    assert isinstance(state.phase, Ready)
    return state


def of_type(actions: list[Action], kind: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def test_the_stack_starts_lazily_on_the_first_browser_job() -> None:
    state = StackState(POLICY)
    assert claim_budget(state, 6, 0, 0) == (6, 6)
    # The new stack's lifetime begins with this claim: the budgets cap it already.
    assert claim_budget(StackState(replace(POLICY, restart_every=4)), 6, 0, 0) == (6, 4)
    assert claim_budget(state, 6, 0, 77) == (6, 3)
    assert claim_budget(state, 6, 17, 80) == (6, 6)  # spent before: decided at the first claim
    state, actions = feed(state, Claimed(browser_jobs=0, since_restart=0, since_boot=0))
    assert state.phase == Idle() and actions == []  # other jobs never start a browser

    state, actions = feed(state, Claimed(browser_jobs=2, since_restart=2, since_boot=2))
    assert state.phase == Starting(StartCause.FIRST, "first browser job", T0, jobs=2)
    assert actions == [StartStack()]
    assert not is_running(state) and browser_status(state)[0] == BrowserState.STARTING

    state, actions = feed(state, StartSucceeded(), now=at(3))
    assert state.phase == Ready() and is_running(state)
    assert actions[:2] == [RecordStackStart(2, "first browser job", 3.0), SetStackCounter(2)]
    assert of_type(actions, SetHostState) == []  # a first start moves no host state
    assert browser_status(state) == (BrowserState.READY, None, None)


def test_a_restart_comes_after_exactly_restart_every_browser_jobs() -> None:
    state = ready()
    assert claim_budget(state, 6, 17, 17) == (6, 3)  # the budget caps browser jobs only
    state, actions = feed(state, Claimed(3, since_restart=19, since_boot=19))
    assert state.phase == Ready() and actions == []
    state, actions = feed(state, Claimed(1, since_restart=20, since_boot=20))
    assert isinstance(state.phase, Draining) and state.phase.kind is Kind.RESTART
    [going] = of_type(actions, SetHostState)
    assert going == SetHostState("restarting", state.phase.reason, ("active", "restarting"))
    assert claim_budget(state, 6, 20, 20) == (0, 0)
    assert maintenance_state(state) == "restarting"

    # In-flight jobs and unwritten outcomes hold the restart back.
    for busy in (Tick(2, 0, 2), Tick(0, 1, 0)):
        assert feed(state, busy)[0] == state
    state, actions = feed(state, IDLE_TICK, now=at(10))
    assert state.phase == Stopping(Kind.RESTART, going.reason, at(10))
    assert actions == [StopStack(measure_memory=True)]
    stopped = StackStopped(killed=7, sigkilled=1, pss_before_bytes=900)
    state, actions = feed(state, stopped, now=at(11))
    assert actions == [StartStack(measure_memory=True)]
    assert maintenance_state(state) == "restarting"
    state, actions = feed(state, StartSucceeded(pss_bytes=300), now=at(13.5))
    assert state.phase == Ready() and maintenance_state(state) is None
    [restart] = of_type(actions, RecordRestart)
    assert restart.details == {
        "reason": going.reason,
        "duration_s": 3.5,  # from the stop of the old stack to the new one checked
        "pss_before_bytes": 900,
        "pss_after_bytes": 300,
        "killed": 7,
        "sigkilled": 1,
        "leftover_pids": [],
    }
    assert SetStackCounter(0) in actions and actions[-1] == SET_ACTIVE


def test_a_budget_of_zero_disables_its_maintenance() -> None:
    state = ready(replace(POLICY, restart_every=0, reboot_every=0))
    assert claim_budget(state, 6, 500, 500) == (6, 6)
    assert feed(state, Claimed(6, 506, 506))[0].phase == Ready()


def test_a_reboot_comes_at_reboot_every_and_wins_over_a_restart() -> None:
    state = ready()
    assert claim_budget(state, 6, 0, 78) == (6, 2)
    state, actions = feed(state, Claimed(2, since_restart=20, since_boot=80))
    assert isinstance(state.phase, Draining) and state.phase.kind is Kind.REBOOT
    assert of_type(actions, SetHostState)[0].to_state == "rebooting"
    assert maintenance_state(state) == "rebooting"

    state, actions = feed(state, IDLE_TICK)
    assert actions == [StopStack(measure_memory=False)]
    state, actions = feed(state, StackStopped(killed=5))
    assert isinstance(state.phase, Rebooting)
    [request] = of_type(actions, RecordRebootRequest)
    assert request.reason.endswith("; 5 stack process(es) ended")
    assert actions[-1] == RunRebootCommand("reboot-now")

    state, actions = feed(state, RebootCommandRan(), now=at(1))
    assert state.phase == AwaitingReboot(at(1) + timedelta(seconds=POLICY.reboot_wait_s))
    assert actions == [] and claim_budget(state, 6, 0, 80) == (0, 0)
    assert maintenance_state(state) == "rebooting"


def awaiting_reboot() -> StackState:
    state, _ = feed(ready(), Claimed(1, 20, 80), IDLE_TICK, StackStopped(), RebootCommandRan())
    assert isinstance(state.phase, AwaitingReboot)
    return state


def test_a_host_still_up_after_the_reboot_wait_restarts_its_stack_and_tries_again_later() -> None:
    state = awaiting_reboot()
    deadline = T0 + timedelta(seconds=POLICY.reboot_wait_s)
    assert next_check_s(state, deadline - timedelta(seconds=1)) == 1.0
    assert feed(state, IDLE_TICK, now=deadline)[0] == state  # not yet

    state, actions = feed(state, IDLE_TICK, now=deadline + timedelta(seconds=1))
    assert isinstance(state.phase, Starting) and state.phase.cause is StartCause.RESTART
    [failed] = of_type(actions, RecordHostEvent)
    assert failed == RecordHostEvent("reboot_failed", "reboot command ran 600 s ago; still up")
    assert actions[-1] == StartStack(measure_memory=True)
    assert not any(isinstance(a, SetHostState) and a.to_state == "disabled" for a in actions)

    state, actions = feed(state, StartSucceeded(), now=deadline + timedelta(seconds=3))
    assert state.phase == Ready() and SET_ACTIVE in actions
    # The spent budget does not stop browser jobs: the next try is a whole budget later.
    assert claim_budget(state, 6, 0, 80) == (6, 6)
    assert feed(state, Claimed(6, 19, 159))[0].phase == Ready()
    state, _ = feed(state, Claimed(1, 20, 160))
    assert isinstance(state.phase, Draining) and state.phase.kind is Kind.REBOOT


def test_a_reboot_command_that_fails_restarts_the_stack_instead() -> None:
    state, _ = feed(ready(), Claimed(1, 20, 80), IDLE_TICK, StackStopped())
    state, actions = feed(state, RebootCommandFailed("exited 1: sudo: a password is required"))
    assert of_type(actions, RecordHostEvent) == [
        RecordHostEvent("reboot_failed", "exited 1: sudo: a password is required")
    ]
    assert isinstance(state.phase, Starting) and actions[-1] == StartStack(measure_memory=True)


def test_a_failed_start_opens_the_breaker_for_browser_jobs_only_with_a_capped_back_off() -> None:
    state, _ = feed(StackState(POLICY), Claimed(1, 1, 1))
    delays: list[float] = []
    now = T0
    for failures in range(1, 9):
        state, actions = feed(state, StartFailed("java: not found\nmore detail"), now=now)
        assert isinstance(state.phase, Failing) and state.phase.failures == failures
        assert state.phase.reason == "browser stack failed to start: java: not found"
        [record] = of_type(actions, RecordStackFailure)
        delay = (state.phase.retry_at - now).total_seconds()
        assert record == RecordStackFailure(state.phase.reason, failures, delay)
        assert of_type(actions, SetHostState) == []  # the host stays active: never disabled
        assert claim_budget(state, 6, 0, 1) == (6, 0)  # every other job still runs here
        status, reason, retry_at = browser_status(state)
        assert (status, reason, retry_at) == (
            BrowserState.FAILING,
            record.reason,
            now + timedelta(seconds=delay),
        )
        delays.append(delay)

        # Not before its time, nor while a browser job is in flight.
        before = state.phase.retry_at - timedelta(seconds=1)
        assert feed(state, IDLE_TICK, now=before)[0] == state
        assert feed(state, Tick(1, 0, 1), now=state.phase.retry_at)[0] == state
        now = state.phase.retry_at
        state, actions = feed(state, Tick(3, 0, 0), now=now)  # other jobs running: fine
        assert isinstance(state.phase, Starting) and state.phase.cause is StartCause.RETRY
        assert actions == [StartStack()]
        assert browser_status(state)[:2] == (BrowserState.FAILING, record.reason)  # until it works
    base, cap = STACK_RETRY_BASE_S, STACK_RETRY_MAX_S
    assert delays == [min(base * 2**n, cap) for n in range(8)]
    assert delays[0] == base and delays[-1] == cap and delays[-2] == cap

    state, actions = feed(state, StartSucceeded(), now=now + timedelta(seconds=2))
    assert state.phase == Ready() and claim_budget(state, 6, 0, 1) == (6, 6)
    assert RecordStackStart(0, "retry after 8 failed start(s)", 2.0) in actions
    assert SetStackCounter(0) in actions
    # The breaker closed: the next failure starts from the base delay again.
    state, _ = feed(state, Claimed(1, 20, 21), IDLE_TICK, StackStopped(), StartFailed("x"))
    assert isinstance(state.phase, Failing) and state.phase.failures == 1


def test_a_restart_that_cannot_start_the_new_stack_gives_the_host_back_its_other_jobs() -> None:
    state, _ = feed(ready(), Claimed(1, 20, 20), IDLE_TICK, StackStopped())
    state, actions = feed(state, StartFailed("Xvfb died"))
    assert isinstance(state.phase, Failing) and actions[-1] == SET_ACTIVE
    assert maintenance_state(state) is None


def test_without_a_reboot_command_the_reboot_is_skipped_and_the_stack_restarted() -> None:
    policy = replace(POLICY, reboot_command=None)
    state = ready(policy)
    assert claim_budget(state, 6, 0, 78) == (6, 2)  # the budget still lands exactly
    state, actions = feed(state, Claimed(2, 20, 80))
    assert isinstance(state.phase, Draining) and state.phase.kind is Kind.RESTART
    [skipped] = of_type(actions, RecordHostEvent)
    assert skipped.event == "reboot_skipped"
    assert "no reboot_command" in skipped.message
    [warning] = [a for a in of_type(actions, Log) if a.level == logging.WARNING]
    assert warning.message == skipped.message
    assert maintenance_state(state) == "restarting"

    state, actions = feed(state, IDLE_TICK, StackStopped(), StartSucceeded())
    assert not of_type(actions, RunRebootCommand) and state.phase == Ready()
    state, actions = feed(state, Claimed(6, 6, 86))
    assert state.phase == Ready() and actions == []  # no second restart right after
    # The next budget: recorded again, but warned about once per process only.
    state, actions = feed(state, Claimed(1, 20, 160))
    assert [a.event for a in of_type(actions, RecordHostEvent)] == ["reboot_skipped"]
    assert not [a for a in of_type(actions, Log) if a.level == logging.WARNING]
    assert isinstance(state.phase, Draining)


def test_a_skipped_reboot_needs_no_restart_of_a_stack_that_just_started() -> None:
    """A consumer started again on a host far past its reboot budget, with no reboot command."""
    policy = replace(POLICY, reboot_command=None, restart_every=0)
    state, _ = feed(StackState(policy), Claimed(2, 2, 500))
    state, actions = feed(state, StartSucceeded())
    assert state.phase == Ready()
    assert [a.event for a in of_type(actions, RecordHostEvent)] == ["reboot_skipped"]
    assert claim_budget(state, 6, 2, 500) == (6, 6)


def test_browser_jobs_released_in_a_row_restart_the_stack() -> None:
    state = ready()
    state, actions = feed(state, JobReturned(1, browser=True, released=True), IDLE_TICK)
    assert actions == [CheckHealth()]  # one release: only a Grid that is down restarts
    state, actions = feed(state, HealthChecked(healthy=True), IDLE_TICK)
    assert state.phase == Ready() and actions == []  # looked at once per release

    # A job that completes in between breaks the row; other jobs say nothing of the stack.
    state, _ = feed(
        state,
        JobReturned(2, browser=True, released=False),
        JobReturned(3, browser=True, released=True),
        JobReturned(4, browser=False, released=True),
        Tick(1, 0, 1),
        HealthChecked(healthy=True),
    )
    assert state.phase == Ready() and state.faults.releases == 1

    state, actions = feed(state, JobReturned(5, browser=True, released=True), IDLE_TICK)
    assert isinstance(state.phase, Stopping)  # nothing in flight: the restart runs at once
    assert state.phase.reason == "stack fault: 2 browser job(s) released in a row"
    assert actions[-1] == StopStack(measure_memory=True)
    state, _ = feed(state, StackStopped(), StartSucceeded())
    assert state.faults.releases == 0  # the new stack starts with a clean record
    assert feed(state, IDLE_TICK) == (state, [])


def test_a_grid_not_ready_after_a_release_restarts_the_stack() -> None:
    state, actions = feed(ready(), JobReturned(1, True, True), Tick(2, 0, 2))
    assert actions == [CheckHealth()]
    state, actions = feed(state, HealthChecked(healthy=False))
    assert isinstance(state.phase, Draining) and "stack fault" in state.phase.reason
    assert of_type(actions, SetHostState)[0].to_state == "restarting"


def test_a_hung_job_gets_its_browser_killed_then_a_restart_after_the_grace() -> None:
    state, actions = feed(ready(), JobAbandoned(7, browser=False))
    assert actions == []  # no browser to kill
    state, actions = feed(state, JobAbandoned(7, browser=True), now=at(100))
    assert actions == [EndSession(7)]
    state, actions = feed(state, Tick(1, 0, 1), now=at(100 + HUNG_SESSION_GRACE_S))
    assert state.phase == Ready() and actions == []
    state, actions = feed(state, Tick(1, 0, 1), now=at(101 + HUNG_SESSION_GRACE_S))
    assert isinstance(state.phase, Draining)
    assert state.phase.reason == "job 7's thread still busy after its browser ended"


def test_a_killed_session_that_returns_is_neither_hung_nor_a_stack_fault() -> None:
    state, _ = feed(ready(), JobAbandoned(7, browser=True), JobReturned(7, True, released=True))
    state, actions = feed(state, IDLE_TICK, now=at(10 * HUNG_SESSION_GRACE_S))
    assert state.phase == Ready() and actions == [] and state.faults.releases == 0


def test_close_stops_a_running_stack_only() -> None:
    assert feed(StackState(POLICY), Close()) == (replace(StackState(POLICY), phase=Closed()), [])
    state, actions = feed(ready(), Close())
    assert state.phase == Closed() and actions == [StopStack()]
    assert claim_budget(state, 6, 0, 0) == (0, 0)
    state, actions = feed(state, StackStopped(leftover_pids=(42,)))
    assert [a.level for a in of_type(actions, Log)] == [logging.ERROR]


def test_next_check_waits_for_the_next_timer() -> None:
    assert next_check_s(ready(), T0) == HUNG_SESSION_GRACE_S / 4
    failing, _ = feed(StackState(replace(POLICY, retry_base_s=2.0)), Claimed(1, 1, 1))
    failing, _ = feed(failing, StartFailed("no"))
    assert next_check_s(failing, T0) == 2.0
    assert next_check_s(failing, at(5)) == 0.05  # overdue: soon, never negative


# -- overlapped restarts --------------------------------------------------------------------

OVERLAP = replace(POLICY, reboot_every=0, overlap_lead=6)


def test_the_next_stack_starts_within_the_lead_and_takes_over_at_the_budget() -> None:
    state = ready(OVERLAP)
    state, actions = feed(state, Claimed(6, since_restart=13, since_boot=13), now=at(100))
    assert actions == [] and state.phase == Ready()  # 7 jobs away: not yet (a slow rate)
    state, actions = feed(state, Claimed(1, since_restart=14, since_boot=14), now=at(101))
    assert of_type(actions, StartNextStack) == [StartNextStack()]
    assert state.phase == Ready(NextStack.STARTING, next_since=at(101))
    state, _ = feed(state, NextStackStarted(), now=at(104))
    assert state.phase == Ready(NextStack.READY, next_since=at(101)) and state.start_s == 3.0

    state, actions = feed(state, Claimed(6, since_restart=20, since_boot=20), now=at(110))
    assert of_type(actions, SwitchStacks) == [SwitchStacks()]
    [switch] = of_type(actions, RecordStackSwitch)
    assert switch.no_claim_s == 0.0 and actions[-1] == SetStackCounter(0)
    assert of_type(actions, SetHostState) == []  # the host never stops claiming
    assert state.phase == Ready() and state.retiring == Retiring(at(110))
    assert claim_budget(state, 6, 0, 20) == (6, 6)

    # The old stack stops once its last job has returned, off the main loop.
    state, actions = feed(state, replace(IDLE_TICK, retiring_busy=2), now=at(111))
    assert of_type(actions, StopOldStacks) == []
    state, actions = feed(state, IDLE_TICK, now=at(112))
    assert actions == [StopOldStacks()] and state.retiring == Retiring(at(110), stopping=True)
    state, actions = feed(state, IDLE_TICK, now=at(112))
    assert actions == []  # once
    state, actions = feed(state, OldStacksStopped(StackStopped(killed=9)), now=at(113))
    assert state.retiring is None
    [retired] = of_type(actions, RecordStackRetired)
    assert retired.details == {"waited_s": 3.0, "killed": 9, "sigkilled": 0, "leftover_pids": []}


def test_a_first_burst_of_claims_is_not_read_as_a_rate_that_starts_the_next_stack() -> None:
    """A stack that has just taken over claims up to its capacity at once: those claims say
    nothing of the rate, so the next stack is not started beside it for its whole lifetime."""
    long_lived = replace(OVERLAP, restart_every=80)
    state = replace(ready(long_lived), start_s=5.0)  # the last stack took 5 s to start
    state, actions = feed(state, Claimed(6, since_restart=6, since_boot=6), now=at(0.1))
    assert of_type(actions, StartNextStack) == [] and state.phase == Ready()
    # Once past that first round, a fast rate starts it early enough for a slow start.
    state, actions = feed(state, Claimed(1, since_restart=70, since_boot=70), now=at(7))
    assert of_type(actions, StartNextStack) == [StartNextStack()]


def test_claims_wait_for_a_next_stack_still_starting_and_the_pause_is_recorded() -> None:
    state = ready(OVERLAP)
    state, _ = feed(state, Claimed(6, since_restart=14, since_boot=14), now=at(1))
    state, actions = feed(state, Claimed(6, since_restart=20, since_boot=20), now=at(2))
    assert state.phase == Replacing(
        "restart after 20 browser job(s) of this stack, 20 since boot", at(2), next_since=at(1)
    )
    assert claim_budget(state, 6, 20, 20) == (6, 0)  # other jobs only
    assert browser_status(state)[0] == BrowserState.READY and maintenance_state(state) is None
    state, actions = feed(state, NextStackStarted(), now=at(2.75))
    [switch] = of_type(actions, RecordStackSwitch)
    assert switch.no_claim_s == 0.75 and state.phase == Ready()


def test_a_next_stack_that_fails_makes_the_restart_drain() -> None:
    state = ready(OVERLAP)
    state, _ = feed(state, Claimed(6, since_restart=14, since_boot=14))
    state, actions = feed(state, NextStackFailed("java: not found\n at ..."))
    assert state.phase == Ready(NextStack.FAILED, "java: not found", next_since=T0)
    state, actions = feed(state, Claimed(6, since_restart=20, since_boot=20))
    assert (
        isinstance(state.phase, Draining)
        and "next stack failed: java: not found" in state.phase.reason
    )
    assert of_type(actions, SetHostState)[0].to_state == "restarting"


def test_the_next_stack_starts_beside_one_retiring_stack() -> None:
    state = replace(ready(OVERLAP), retiring=Retiring(T0))
    state, actions = feed(state, Claimed(6, since_restart=16, since_boot=16))
    assert StartNextStack() in actions


def test_with_two_stacks_retiring_the_next_waits_for_a_free_directory() -> None:
    state = replace(ready(OVERLAP), retiring=Retiring(T0, stacks=2))
    state, actions = feed(state, Claimed(6, since_restart=16, since_boot=16))
    assert of_type(actions, StartNextStack) == []
    state, actions = feed(state, Claimed(4, since_restart=20, since_boot=20), now=at(1))
    assert isinstance(state.phase, Replacing) and not state.phase.started and actions == []
    # One of the two stops (the other still runs a long job): a directory is free.
    stopped = OldStacksStopped(StackStopped(), remaining=1)
    state, actions = feed(state, stopped, now=at(2))
    assert StartNextStack() in actions and state.phase == Replacing(
        state.phase.reason, at(1), started=True, next_since=at(2)
    )
    assert state.retiring == Retiring(T0, stacks=1)


def test_a_switch_with_a_stack_still_retiring_retires_both() -> None:
    state = replace(ready(OVERLAP), retiring=Retiring(T0))
    state, _ = feed(state, Claimed(6, since_restart=16, since_boot=16))
    state, _ = feed(state, NextStackStarted(), now=at(3))
    state, actions = feed(state, Claimed(4, since_restart=20, since_boot=20), now=at(4))
    assert SwitchStacks() in actions and state.retiring == Retiring(T0, stacks=2)
    # The older one's last job returned while the newer one still runs one: stop what is done.
    busy = replace(IDLE_TICK, retiring_busy=1, retiring_done=1)
    state, actions = feed(state, busy, now=at(5))
    assert StopOldStacks() in actions


def test_a_fast_claim_rate_starts_the_next_stack_earlier() -> None:
    state = replace(ready(OVERLAP), lifetime_since=T0, start_s=8.0)
    # 10 jobs in 5 s: 10 left are ~5 s away, within twice an 8 s start.
    state, actions = feed(state, Claimed(6, since_restart=10, since_boot=10), now=at(5))
    assert StartNextStack() in actions
    slow = replace(ready(OVERLAP), lifetime_since=T0, start_s=8.0)
    state, actions = feed(slow, Claimed(6, since_restart=10, since_boot=10), now=at(60))
    assert actions == []
