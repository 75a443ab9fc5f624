"""The browser stack's one transition: ``step(state, event, now) -> (state, actions)``.

Every decision of consumer.browser.supervisor.stack_supervisor is made here, on plain values: the
states are in consumer.browser.supervisor.states, the events and actions in
consumer.browser.supervisor.events_and_actions; what happens when a budget is spent (maintenance,
the next stack, the switch) in consumer.browser.supervisor.restart_rules. ``now``, a timezone-aware
datetime, comes with each event, so a test drives every timer by hand.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from scrapefleet.common.error_lines import first_line
from scrapefleet.common.status.document import MAX_REASON_CHARS
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    SET_ACTIVE,
    Action,
    Actions,
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
    RecordStackStart,
    RunRebootCommand,
    SetStackCounter,
    StackStopped,
    StartFailed,
    StartStack,
    StartSucceeded,
    StopOldStacks,
    StopStack,
    Tick,
)
from scrapefleet.consumer.browser.supervisor.maintenance_policy import retry_delay_s
from scrapefleet.consumer.browser.supervisor.restart_rules import (
    after_claim,
    begin_drain,
    stacks_retired,
    switch_stacks,
)
from scrapefleet.consumer.browser.supervisor.states import (
    AwaitingReboot,
    Closed,
    Draining,
    Failing,
    Faults,
    Idle,
    Kind,
    NextStack,
    Ready,
    Rebooting,
    Replacing,
    StackState,
    StartCause,
    Starting,
    Stopping,
    is_running,
)

MB = 1024 * 1024


def step(state: StackState, event: Event, now: datetime) -> tuple[StackState, Actions]:
    """The state after ``event`` arrived at ``now``, and what to do about it, in order."""
    state, done = _whatever_the_phase(state, event, now)
    if done is not None:
        return state, done
    return _by_phase(state, event, now)


def _whatever_the_phase(
    state: StackState, event: Event, now: datetime
) -> tuple[StackState, Actions | None]:
    """Events handled the same in every phase: their state and actions, or the state (a claim's
    count taken) and None when the phase decides the rest."""
    match event:
        case JobReturned():
            return replace(state, faults=state.faults.returned(event)), ()
        case JobAbandoned(browser=False):
            return state, ()
        case JobAbandoned(job_id=job_id):
            abandoned = (*state.faults.abandoned, (job_id, now))
            return replace(state, faults=replace(state.faults, abandoned=abandoned)), (
                EndSession(job_id),
            )
        case Claimed(since_boot=since_boot):
            state = replace(state, since_boot=since_boot)
        case Close():
            running = is_running(state) or state.retiring is not None
            return replace(state, phase=Closed()), ((StopStack(),) if running else ())
        case OldStacksStopped() as retired:
            return stacks_retired(state, retired, now)
        case Tick(retiring_busy=busy, retiring_done=done) if (
            (busy == 0 or done > 0) and state.retiring is not None and not state.retiring.stopping
        ):
            # A retired stack's last job has returned: stop it, off the main loop.
            retiring = replace(state.retiring, stopping=True)
            state, actions = step(replace(state, retiring=retiring), event, now)
            return state, (StopOldStacks(), *actions)
    return state, None


def _by_phase(state: StackState, event: Event, now: datetime) -> tuple[StackState, Actions]:
    match state.phase, event:
        case Idle(), Claimed(browser_jobs=jobs) if jobs > 0:
            starting = Starting(StartCause.FIRST, "first browser job", now, jobs=jobs)
            return replace(state, phase=starting), (StartStack(),)
        case Starting() as starting, StartSucceeded() as started:
            return _started(state, starting, started, now)
        case Starting() as starting, StartFailed(error=error):
            return _start_failed(state, starting, error, now)
        case Ready(), Claimed(since_restart=since_restart):
            return after_claim(state, since_restart, now, fresh=False)
        case Ready() as ready, NextStackStarted() if ready.next is NextStack.STARTING:
            state = replace(state, start_s=_seconds_since(ready.next_since, now, state.start_s))
            return replace(state, phase=replace(ready, next=NextStack.READY)), (
                Log(logging.INFO, "next browser stack ready; it takes over at the budget"),
            )
        case Ready() as ready, NextStackFailed(error=error) if ready.next is NextStack.STARTING:
            failed = replace(ready, next=NextStack.FAILED, next_error=_first_line(error))
            return replace(state, phase=failed), (
                Log(logging.WARNING, f"next browser stack failed to start: {error}"),
            )
        case Replacing() as replacing, NextStackStarted() as started:
            state = replace(state, start_s=_seconds_since(replacing.next_since, now, state.start_s))
            return switch_stacks(state, replacing.reason, replacing.since, started, now)
        case Replacing() as replacing, NextStackFailed(error=error):
            reason = f"{replacing.reason}; the next stack failed to start: {_first_line(error)}"
            return begin_drain(state, Kind.RESTART, reason)
    return _by_later_phase(state, event, now)


def _by_later_phase(state: StackState, event: Event, now: datetime) -> tuple[StackState, Actions]:
    policy = state.policy
    match state.phase, event:
        case Ready(), Tick() as tick:
            return _look_at_stack(state, tick, now)
        case Ready(), HealthChecked(healthy=False):
            released = f"{state.faults.releases} browser job(s) released in a row"
            return begin_drain(state, Kind.RESTART, f"stack fault: Grid not ready after {released}")
        case Draining() as draining, Tick() as tick if not (tick.busy or tick.unwritten):
            stopping = Stopping(draining.kind, draining.reason, now)
            measure = draining.kind is Kind.RESTART
            return replace(state, phase=stopping), (StopStack(measure_memory=measure),)
        case Stopping() as stopping, StackStopped() as stopped:
            return _stopped(state, stopping, stopped)
        case Rebooting(), RebootCommandRan():
            deadline = now + timedelta(seconds=policy.reboot_wait_s)
            return replace(state, phase=AwaitingReboot(deadline)), ()
        case Rebooting(), RebootCommandFailed(reason=reason):
            return _reboot_failed(state, reason, now)
        case AwaitingReboot(deadline=deadline), Tick() if now > deadline:
            ran = f"reboot command ran {policy.reboot_wait_s:.0f} s ago; still up"
            return _reboot_failed(state, ran, now)
        case Failing() as failing, Tick(browser_busy=0) if now >= failing.retry_at:
            reason = f"retry after {failing.failures} failed start(s)"
            starting = Starting(StartCause.RETRY, reason, now, retrying=failing)
            return replace(state, phase=starting), (StartStack(),)
        case Closed(), StackStopped(leftover_pids=pids) if pids:
            return state, (Log(logging.ERROR, f"browser stack processes left at exit: {pids}"),)
    return state, ()


def _started(
    state: StackState, starting: Starting, started: StartSucceeded, now: datetime
) -> tuple[StackState, Actions]:
    duration_s = round((now - starting.since).total_seconds(), 3)
    actions: list[Action] = []
    if starting.retrying is not None:
        failures = starting.retrying.failures
        actions.append(Log(logging.INFO, f"browser stack is back after {failures} failed start(s)"))
    # Releases seen while no stack ran (jobs with no session) say nothing of this one.
    state = replace(state, phase=Ready(), faults=Faults(), lifetime_since=now, start_s=duration_s)
    if starting.cause is StartCause.RESTART:
        stopped = starting.stopped or StackStopped()
        before, after = stopped.pss_before_bytes / MB, started.pss_bytes / MB
        actions += [
            RecordRestart(starting.reason, duration_s, stopped, started.pss_bytes),
            SetStackCounter(0),
            Log(
                logging.INFO,
                f"browser stack restarted in {duration_s:.1f} s: PSS {before:.0f}"
                f" -> {after:.0f} MB, {stopped.killed} process(es) ended",
            ),
            SET_ACTIVE,
        ]
        return state, tuple(actions)
    actions += [
        RecordStackStart(starting.jobs, starting.reason, duration_s),
        SetStackCounter(starting.jobs),
        Log(logging.INFO, f"browser stack started in {duration_s:.1f} s"),
    ]
    # The claim that started it (or the spent budget a failing stack sat on) may be due already.
    state, due = after_claim(state, starting.jobs, now, fresh=True)
    return state, (*actions, *due)


def _start_failed(
    state: StackState, starting: Starting, error: str, now: datetime
) -> tuple[StackState, Actions]:
    """No browser jobs here until the next try; every other job goes on."""
    policy = state.policy
    failures = (starting.retrying.failures if starting.retrying else 0) + 1
    delay_s = retry_delay_s(failures, policy.retry_base_s, policy.retry_max_s)
    reason = f"browser stack failed to start: {_first_line(error)}"[:MAX_REASON_CHARS]
    failing = Failing(failures, reason, now + timedelta(seconds=delay_s))
    actions: list[Action] = [
        Log(
            logging.ERROR,
            f"browser stack failed to start ({failures} in a row; next try in"
            f" {delay_s:.0f} s): {error}",
        ),
        RecordStackFailure(reason, failures, delay_s),
    ]
    if starting.cause is StartCause.RESTART:  # the host said restarting: it takes work again
        actions.append(SET_ACTIVE)
    return replace(state, phase=failing), tuple(actions)


def _first_line(text: str) -> str:
    return (first_line(text) or "no error message")[:MAX_REASON_CHARS]


def _seconds_since(since: datetime | None, now: datetime, default: float) -> float:
    return round((now - since).total_seconds(), 3) if since is not None else default


def _look_at_stack(state: StackState, tick: Tick, now: datetime) -> tuple[StackState, Actions]:
    """Faults the job threads reported; a restart they call for starts in the same tick when
    nothing is in flight."""
    faults = state.faults
    hung = faults.hung_job(now, state.policy.hung_grace_s)
    if hung is not None:
        state, actions = begin_drain(
            state, Kind.RESTART, f"job {hung}'s thread still busy after its browser ended"
        )
    elif faults.unseen_release:
        state = replace(state, faults=replace(faults, unseen_release=False))
        if faults.releases < state.policy.releases_before_restart:
            return state, (CheckHealth(),)  # one release: a restart only if the Grid is down
        state, actions = begin_drain(
            state, Kind.RESTART, f"stack fault: {faults.releases} browser job(s) released in a row"
        )
    else:
        return state, ()
    state, more = step(state, tick, now)
    return state, (*actions, *more)


def _stopped(
    state: StackState, stopping: Stopping, stopped: StackStopped
) -> tuple[StackState, Actions]:
    actions: list[Action] = []
    if stopped.leftover_pids:
        pids = list(stopped.leftover_pids)
        actions.append(Log(logging.ERROR, f"processes of the old stack survived its stop: {pids}"))
    if stopping.kind is Kind.RESTART:
        starting = Starting(StartCause.RESTART, stopping.reason, stopping.since, stopped=stopped)
        return replace(state, phase=starting), (*actions, StartStack(measure_memory=True))
    reason = f"{stopping.reason}; {stopped.killed} stack process(es) ended"
    command = state.policy.reboot_command or ""
    return replace(state, phase=Rebooting(reason)), (
        *actions,
        RecordRebootRequest(reason),
        Log(logging.WARNING, f"rebooting: running {command!r}"),
        RunRebootCommand(command),
    )


def _reboot_failed(state: StackState, why: str, now: datetime) -> tuple[StackState, Actions]:
    """The reboot did not happen: say so, and restart the stack instead."""
    starting = Starting(StartCause.RESTART, f"reboot failed: {why}", now)
    return replace(state, phase=starting), (
        Log(logging.ERROR, f"reboot failed ({why}); restarting the browser stack instead"),
        RecordHostEvent("reboot_failed", why),
        StartStack(measure_memory=True),
    )
