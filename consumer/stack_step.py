"""The browser stack's one transition: ``step(state, event, now) -> (state, actions)``.

Every decision of consumer.stack_supervisor is made here, on plain values: the states are in
consumer.stack_states, the events and actions in consumer.stack_events. ``now``, a
timezone-aware datetime, comes with each event, so a test drives every timer by hand.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from scrapefleet.common.host_status import MAX_REASON_CHARS
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.maintenance import decide_maintenance, retry_delay_s
from scrapefleet.consumer.stack_events import (
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
    RebootCommandFailed,
    RebootCommandRan,
    RecordHostEvent,
    RecordRebootRequest,
    RecordRestart,
    RecordStackFailure,
    RecordStackStart,
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
from scrapefleet.consumer.stack_states import (
    AwaitingReboot,
    Closed,
    Draining,
    Failing,
    Faults,
    Idle,
    Kind,
    Ready,
    Rebooting,
    StackState,
    StartCause,
    Starting,
    Stopping,
    is_running,
)

MB = 1024 * 1024


def step(state: StackState, event: Event, now: datetime) -> tuple[StackState, Actions]:
    """The state after ``event`` arrived at ``now``, and what to do about it, in order."""
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
            running = is_running(state)
            return replace(state, phase=Closed()), ((StopStack(),) if running else ())

    policy = state.policy
    match state.phase, event:
        case Idle(), Claimed(browser_jobs=jobs) if jobs > 0:
            starting = Starting(StartCause.FIRST, "first browser job", now, jobs=jobs)
            return replace(state, phase=starting), (StartStack(),)
        case Starting() as starting, StartSucceeded() as started:
            return _started(state, starting, started, now)
        case Starting() as starting, StartFailed(error=error):
            return _start_failed(state, starting, error, now)
        case Ready(), Claimed(since_restart=since_restart):
            return _after_claim(state, since_restart, fresh=False)
        case Ready(), Tick() as tick:
            return _look_at_stack(state, tick, now)
        case Ready(), HealthChecked(healthy=False):
            released = f"{state.faults.releases} browser job(s) released in a row"
            return _begin(state, Kind.RESTART, f"stack fault: Grid not ready after {released}")
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
    state = replace(state, phase=Ready(), faults=Faults())
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
    state, due = _after_claim(state, starting.jobs, fresh=True)
    return state, (*actions, *due)


def _start_failed(
    state: StackState, starting: Starting, error: str, now: datetime
) -> tuple[StackState, Actions]:
    """No browser jobs here until the next try; every other job goes on."""
    policy = state.policy
    failures = (starting.retrying.failures if starting.retrying else 0) + 1
    delay_s = retry_delay_s(failures, policy.retry_base_s, policy.retry_max_s)
    lines = error.strip().splitlines()
    reason = f"browser stack failed to start: {lines[0] if lines else 'no error message'}"
    reason = reason[:MAX_REASON_CHARS]
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


def _after_claim(
    state: StackState, since_restart: int, *, fresh: bool
) -> tuple[StackState, Actions]:
    """Begin the maintenance whose budget is spent, if any. ``fresh``: the stack has just
    started for this claim (or after failing)."""
    policy, since_boot = state.policy, state.since_boot
    due = decide_maintenance(
        since_restart, since_boot - state.reboot_base, policy.restart_every, policy.reboot_every
    )
    figures = f"after {since_restart} browser job(s) of this stack, {since_boot} since boot"
    if due == "none":
        return state, ()
    if due == "restart":
        return _begin(state, Kind.RESTART, f"restart {figures}")
    # Should this reboot not happen, the next is due a whole budget later.
    state = replace(state, reboot_base=since_boot)
    if policy.reboot_command:
        return _begin(state, Kind.REBOOT, f"reboot {figures}")
    # No reboot mechanism here: restart instead, unless the stack is as new as that would make it.
    restart = not fresh or decide_maintenance(since_restart, 0, policy.restart_every, 0) != "none"
    instead = "the browser stack is restarted instead" if restart else "its stack just started"
    skipped = (
        f"reboot skipped after {since_boot} browser job(s) since boot: no reboot_command is set,"
        f" so scrapefleet never reboots this machine; {instead}"
    )
    actions: list[Action] = [RecordHostEvent("reboot_skipped", skipped)]
    if not state.skip_warned:
        state = replace(state, skip_warned=True)
        actions.append(Log(logging.WARNING, skipped))
    if restart:
        state, begun = _begin(state, Kind.RESTART, f"restart instead of a reboot {figures}")
        actions += begun
    return state, tuple(actions)


def _begin(state: StackState, kind: Kind, reason: str) -> tuple[StackState, Actions]:
    """No more claims; the host says so at once, so the producer assigns nothing more."""
    host_state = HostState.REBOOTING if kind is Kind.REBOOT else HostState.RESTARTING
    return replace(state, phase=Draining(kind, reason)), (
        Log(logging.INFO, f"{host_state}: {reason}"),
        SetHostState(host_state, reason, (HostState.ACTIVE, HostState.RESTARTING)),
    )


def _look_at_stack(state: StackState, tick: Tick, now: datetime) -> tuple[StackState, Actions]:
    """Faults the job threads reported; a restart they call for starts in the same tick when
    nothing is in flight."""
    faults = state.faults
    hung = faults.hung_job(now, state.policy.hung_grace_s)
    if hung is not None:
        state, actions = _begin(
            state, Kind.RESTART, f"job {hung}'s thread still busy after its browser ended"
        )
    elif faults.unseen_release:
        state = replace(state, faults=replace(faults, unseen_release=False))
        if faults.releases < state.policy.releases_before_restart:
            return state, (CheckHealth(),)  # one release: a restart only if the Grid is down
        state, actions = _begin(
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
