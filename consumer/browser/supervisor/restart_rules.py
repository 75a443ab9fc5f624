"""When a browser stack's budgets are spent, as part of consumer.browser.supervisor.step's one
transition: after a claim, maintenance begins (a drain into a restart or a reboot) or, near the
restart budget, the next stack starts beside the running one; the overlapped switch, and the
retired stacks stopped behind it. Plain values in, state and actions out, like step itself.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    Action,
    Actions,
    Log,
    NextStackStarted,
    OldStacksStopped,
    RecordHostEvent,
    RecordStackRetired,
    RecordStackSwitch,
    SetHostState,
    SetStackCounter,
    StartNextStack,
    SwitchStacks,
)
from scrapefleet.consumer.browser.supervisor.maintenance_policy import decide_maintenance
from scrapefleet.consumer.browser.supervisor.states import (
    STACK_DIRECTORIES,
    Draining,
    Faults,
    Kind,
    NextStack,
    Ready,
    Replacing,
    Retiring,
    StackState,
)


def after_claim(
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
        return start_next_if_near(state, since_restart, now)
    if due == "restart":
        return restart_or_switch(state, f"restart {figures}", now)
    # Should this reboot not happen, the next is due a whole budget later.
    state = replace(state, reboot_base=since_boot)
    if policy.reboot_command:
        return begin_drain(state, Kind.REBOOT, f"reboot {figures}")
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
        state, begun = begin_drain(state, Kind.RESTART, f"restart instead of a reboot {figures}")
        actions += begun
    return state, tuple(actions)


def budget_near(state: StackState, since_restart: int, now: datetime) -> bool:
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


def directory_free(state: StackState) -> bool:
    """Is a work directory free for the next stack? The running stack holds one, each stack
    still retiring one more (a retired stack's directory is reused once it has stopped)."""
    retiring = state.retiring.stacks if state.retiring else 0
    return 1 + retiring < STACK_DIRECTORIES


def start_next_if_near(
    state: StackState, since_restart: int, now: datetime
) -> tuple[StackState, Actions]:
    policy, phase = state.policy, state.phase
    if (
        policy.overlap_lead > 0
        and policy.restart_every > 0
        and isinstance(phase, Ready)
        and phase.next is NextStack.NONE
        and directory_free(state)
        and budget_near(state, since_restart, now)
    ):
        return replace(state, phase=Ready(NextStack.STARTING, next_since=now)), (
            Log(logging.INFO, f"starting the next browser stack after {since_restart} job(s)"),
            StartNextStack(),
        )
    return state, ()


def restart_or_switch(state: StackState, reason: str, now: datetime) -> tuple[StackState, Actions]:
    """The restart budget is spent: switch to the next stack (overlapped), or drain. Jobs
    claimed before the switch still run on the old stack (the supervisor keeps track)."""
    phase = state.phase
    if state.policy.overlap_lead <= 0 or not isinstance(phase, Ready):
        return begin_drain(state, Kind.RESTART, reason)
    match phase.next:
        case NextStack.READY:
            return switch_stacks(state, reason, now, NextStackStarted(), now)
        case NextStack.STARTING:
            return replace(state, phase=Replacing(reason, now, next_since=phase.next_since)), ()
        case NextStack.FAILED:
            return begin_drain(
                state, Kind.RESTART, f"{reason}; next stack failed: {phase.next_error}"
            )
    if not directory_free(state):  # it starts once a retired one has stopped
        return replace(state, phase=Replacing(reason, now, started=False)), ()
    return replace(state, phase=Replacing(reason, now, next_since=now)), (StartNextStack(),)


def switch_stacks(
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


def stacks_retired(
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
    if isinstance(state.phase, Replacing) and not state.phase.started and directory_free(state):
        state = replace(state, phase=replace(state.phase, started=True, next_since=now))
        actions.append(StartNextStack())
    return state, tuple(actions)


def begin_drain(state: StackState, kind: Kind, reason: str) -> tuple[StackState, Actions]:
    """No more claims; the host says so at once, so the producer assigns nothing more."""
    host_state = HostState.REBOOTING if kind is Kind.REBOOT else HostState.RESTARTING
    return replace(state, phase=Draining(kind, reason)), (
        Log(logging.INFO, f"{host_state}: {reason}"),
        SetHostState(host_state, reason, (HostState.ACTIVE, HostState.RESTARTING)),
    )
