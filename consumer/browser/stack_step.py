"""The browser stack's one transition: ``step(state, event, now) -> (state, actions)``.

Every decision of consumer.browser.stack_supervisor is made here, on plain values: the states are in
consumer.browser.stack_states, the events and actions in consumer.browser.stack_events. ``now``, a
timezone-aware datetime, comes with each event, so a test drives every timer by hand.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from scrapefleet.common.status.document import MAX_REASON_CHARS
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.browser.maintenance import decide_maintenance, retry_delay_s
from scrapefleet.consumer.browser.stack_events import (
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
from scrapefleet.consumer.browser.stack_states import (
    STACK_DIRECTORIES,
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
    Retiring,
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
            return _retired(state, retired, now)
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
            return _after_claim(state, since_restart, now, fresh=False)
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
            return _switch(state, replacing.reason, replacing.since, started, now)
        case Replacing() as replacing, NextStackFailed(error=error):
            reason = f"{replacing.reason}; the next stack failed to start: {_first_line(error)}"
            return _begin(state, Kind.RESTART, reason)
    return _by_later_phase(state, event, now)


def _by_later_phase(state: StackState, event: Event, now: datetime) -> tuple[StackState, Actions]:
    policy = state.policy
    match state.phase, event:
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
    state, due = _after_claim(state, starting.jobs, now, fresh=True)
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


def _after_claim(
    state: StackState, since_restart: int, now: datetime, *, fresh: bool
) -> tuple[StackState, Actions]:
    """Begin the maintenance whose budget is spent, if any, or start the next stack when the
    restart budget comes within ``overlap_lead``. ``fresh``: the stack has just started for
    this claim (or after failing)."""
    policy, since_boot = state.policy, state.since_boot
    due = decide_maintenance(
        since_restart, since_boot - state.reboot_base, policy.restart_every, policy.reboot_every
    )
    figures = f"after {since_restart} browser job(s) of this stack, {since_boot} since boot"
    if due == "none":
        return _start_next_if_near(state, since_restart, now)
    if due == "restart":
        return _restart(state, f"restart {figures}", now)
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


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return (lines[0] if lines else "no error message")[:MAX_REASON_CHARS]


def _seconds_since(since: datetime | None, now: datetime, default: float) -> float:
    return round((now - since).total_seconds(), 3) if since is not None else default


def _budget_near(state: StackState, since_restart: int, now: datetime) -> bool:
    """Is the restart budget within ``overlap_lead`` jobs, or, at this stack's claim rate so
    far, within twice the time the last start took?"""
    policy = state.policy
    left = policy.restart_every - since_restart
    if left <= policy.overlap_lead:
        return True
    # A rate needs more than the first round of claims: a stack that has just taken over
    # claims up to its capacity at once, and that burst, read as a rate, would start the next
    # stack at once and keep two stacks alive for the whole lifetime.
    if state.lifetime_since is None or since_restart <= policy.overlap_lead:
        return False
    elapsed_s = (now - state.lifetime_since).total_seconds()
    if elapsed_s <= 0:  # no rate yet: the jobs that started the stack
        return False
    return left * elapsed_s / since_restart <= 2 * state.start_s


def _directory_free(state: StackState) -> bool:
    """Is a work directory free for the next stack? The running stack holds one, each stack
    still retiring one more (a retired stack's directory is reused once it has stopped)."""
    retiring = state.retiring.stacks if state.retiring else 0
    return 1 + retiring < STACK_DIRECTORIES


def _start_next_if_near(
    state: StackState, since_restart: int, now: datetime
) -> tuple[StackState, Actions]:
    policy, phase = state.policy, state.phase
    if (
        policy.overlap_lead > 0
        and policy.restart_every > 0
        and isinstance(phase, Ready)
        and phase.next is NextStack.NONE
        and _directory_free(state)
        and _budget_near(state, since_restart, now)
    ):
        return replace(state, phase=Ready(NextStack.STARTING, next_since=now)), (
            Log(logging.INFO, f"starting the next browser stack after {since_restart} job(s)"),
            StartNextStack(),
        )
    return state, ()


def _restart(state: StackState, reason: str, now: datetime) -> tuple[StackState, Actions]:
    """The restart budget is spent: switch to the next stack (overlapped), or drain. Jobs
    claimed before the switch still run on the old stack (the supervisor keeps track)."""
    phase = state.phase
    if state.policy.overlap_lead <= 0 or not isinstance(phase, Ready):
        return _begin(state, Kind.RESTART, reason)
    match phase.next:
        case NextStack.READY:
            return _switch(state, reason, now, NextStackStarted(), now)
        case NextStack.STARTING:
            return replace(state, phase=Replacing(reason, now, next_since=phase.next_since)), ()
        case NextStack.FAILED:
            return _begin(state, Kind.RESTART, f"{reason}; next stack failed: {phase.next_error}")
    if not _directory_free(state):  # it starts once a retired one has stopped
        return replace(state, phase=Replacing(reason, now, started=False)), ()
    return replace(state, phase=Replacing(reason, now, next_since=now)), (StartNextStack(),)


def _switch(
    state: StackState, reason: str, since: datetime, started: NextStackStarted, now: datetime
) -> tuple[StackState, Actions]:
    """Jobs claimed from now on run on the next stack; the running one retires."""
    no_claim_s = round(max((now - since).total_seconds(), 0.0), 3)
    # One still retiring is stopped with this one; its own wait counts from its switch.
    retiring = (
        replace(state.retiring, stacks=state.retiring.stacks + 1)
        if state.retiring
        else Retiring(now)
    )
    state = replace(state, phase=Ready(), faults=Faults(), retiring=retiring, lifetime_since=now)
    return state, (
        SwitchStacks(),
        RecordStackSwitch(reason, no_claim_s, started.pss_old_bytes, started.pss_new_bytes),
        Log(logging.INFO, f"browser stack replaced ({reason}); claims paused {no_claim_s:.3f} s"),
        SetStackCounter(0),  # last: the daemon claims again once the database says 0 too
    )


def _retired(
    state: StackState, retired: OldStacksStopped, now: datetime
) -> tuple[StackState, Actions]:
    stopped, retiring = retired.stopped, state.retiring
    waited_s = round((now - retiring.since).total_seconds(), 3) if retiring else 0.0
    actions: list[Action] = [RecordStackRetired(stopped, waited_s)]
    if stopped.leftover_pids:
        pids = list(stopped.leftover_pids)
        actions.append(Log(logging.ERROR, f"processes of a retired stack outlived it: {pids}"))
    if retired.remaining and retiring is not None:  # retired meanwhile: its jobs still run
        retiring = replace(retiring, stopping=False, stacks=retired.remaining)
        state = replace(state, retiring=retiring)
    else:
        state = replace(state, retiring=None)
    if isinstance(state.phase, Replacing) and not state.phase.started and _directory_free(state):
        state = replace(state, phase=replace(state.phase, started=True, next_since=now))
        actions.append(StartNextStack())
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
