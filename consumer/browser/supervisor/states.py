"""The browser stack of one consumer host as named states, and what each means to the daemon.

consumer.browser.supervisor.step moves between them (``step(state, event, now) -> (state,
actions)``); consumer.browser.supervisor.stack_supervisor feeds it events and carries out the
actions. Nothing here does I/O or reads a clock.

    Idle --first browser job--> Starting(first) --ok--> Ready
    Ready --restart budget spent, next stack ready--> Ready (switched; the old one retires)
          --restart budget spent, next stack starting--> Replacing --next up--> Ready (switched)
    Ready --budget spent (reboot, or no overlap), or a fault--> Draining --nothing in flight-->
          Stopping
    Stopping --restart--> Starting(restart) --ok--> Ready
             --reboot--> Rebooting --command ran--> AwaitingReboot (the reboot ends the process)
    Rebooting --command failed--> Starting(restart)
    AwaitingReboot --still up after reboot_wait_s--> Starting(restart)
    Starting(any) --failed--> Failing --retry time, no browser job in flight--> Starting(retry)
    any --close--> Closed

- Idle: no stack until the first browser job, so a host that runs only other jobs never needs
  Java, Xvfb or Chromium, and never restarts or reboots for them. The claim that starts the
  stack begins its lifetime, so the budgets cap it too.
- Ready: browser jobs are claimed under the budgets
  (consumer.browser.supervisor.maintenance_policy); the claim that spends one moves to Draining.
  Faults seen here restart the stack too: ``releases_before_restart`` browser jobs released in a
  row, a released job with the Grid not ready, or a timed-out job whose thread is still busy
  ``hung_grace_s`` after its browser was killed.
- Overlapped restarts (``overlap_lead`` > 0): the next stack starts beside the running one when
  the restart budget is ``overlap_lead`` browser jobs away (the host's capacity) or, at the
  rate jobs are claimed, less than twice the last start's duration away; at the budget the
  claims switch to it and the old stack retires: its idle sessions end at once, its
  in-flight jobs finish on it, then it is stopped and its processes checked gone. The next stack
  may start while the one before is still retiring (three work directories); with two
  retiring it waits for one to stop. Browser jobs
  cannot be claimed only while a next stack not yet up is awaited (Replacing); other jobs
  always can. Sessions across both stacks never exceed the capacity (the pools share permits).
  A next stack that fails to start makes that restart a draining one.
- Draining to the end of a restart or reboot: nothing is claimed, the host says ``restarting``
  or ``rebooting`` (the producer assigns nothing more), the in-flight jobs finish, then the
  maintenance runs.
- Failing: a circuit breaker open for browser jobs only: every other job is still claimed, and
  the stack is tried again after a back-off doubling from ``retry_base_s`` up to
  ``retry_max_s`` (the half-open state). Only an operator disables a host.
- The reboot budget counts browser jobs since boot, or since this consumer last decided a
  reboot: one that did not happen (command failed, host still up) restarts the stack instead
  and is tried again ``reboot_every`` browser jobs later. With no reboot command the host never
  reboots: at the budget the stack is restarted instead (unless it has just started), a
  ``reboot_skipped`` host event says why, and the first skip of the process warns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from scrapefleet.common.constants import HUNG_SESSION_GRACE_S, REBOOT_WAIT_S
from scrapefleet.common.status.document import BrowserState
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.browser.supervisor.events_and_actions import JobReturned, StackStopped
from scrapefleet.consumer.browser.supervisor.maintenance_policy import claims_allowed

RELEASES_BEFORE_RESTART = 2  # browser jobs released in a row with a stack that looks healthy
MIN_CHECK_S = 0.05  # never ask to be woken sooner than this
FIRST_START_GUESS_S = 10.0  # how long a stack takes to start, until one has been measured
# Work directories per host: the running stack, the next one starting, and one retiring (the
# stack before, whose last jobs still run while its successor's lead has begun).
STACK_DIRECTORIES = 3


@dataclass(frozen=True)
class Policy:
    """The settings the decisions read."""

    restart_every: int  # browser jobs per stack lifetime; 0 = never
    reboot_every: int  # browser jobs per boot; 0 = never
    reboot_command: str | None  # None: no reboot mechanism here, never reboot
    retry_base_s: float
    retry_max_s: float
    hung_grace_s: float = HUNG_SESSION_GRACE_S
    reboot_wait_s: float = REBOOT_WAIT_S
    releases_before_restart: int = RELEASES_BEFORE_RESTART
    overlap_lead: int = 0  # browser jobs before the budget to start the next stack; 0: drain


# -- states ---------------------------------------------------------------------------------


class Kind(StrEnum):
    """A maintenance of the stack."""

    RESTART = "restart"
    REBOOT = "reboot"


class StartCause(StrEnum):
    FIRST = "first"  # the first browser job of this consumer
    RETRY = "retry"  # a failing stack's next try
    RESTART = "restart"  # a restart, or a reboot that did not happen


@dataclass(frozen=True)
class Idle:
    """No stack yet: it starts with the first browser job."""


@dataclass(frozen=True)
class Starting:
    cause: StartCause
    reason: str
    since: datetime  # when the start began (a restart: when the old stack's stop began)
    jobs: int = 0  # browser jobs its lifetime begins with (a first start: those just claimed)
    retrying: Failing | None = None  # a retry: the failure it tries to end (still in force)
    stopped: StackStopped | None = None  # a restart: what stopping the old stack did


class NextStack(StrEnum):
    """The next stack of an overlapped restart."""

    NONE = "none"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"  # this stack's restart drains instead


@dataclass(frozen=True)
class Ready:
    """Started and checked with a real session: takes browser jobs under its budgets."""

    next: NextStack = NextStack.NONE
    next_error: str | None = None
    next_since: datetime | None = None  # when the next stack began to start


@dataclass(frozen=True)
class Replacing:
    """The restart budget is spent and the next stack is still starting: no browser claims
    until it is up (the in-flight jobs go on)."""

    reason: str
    since: datetime
    started: bool = True  # False: the next stack starts once the retiring one has stopped
    next_since: datetime | None = None  # when the next stack began to start


@dataclass(frozen=True)
class Retiring:
    """Stacks an overlapped restart replaced, until their last job returns and they stop."""

    since: datetime
    stopping: bool = False
    stacks: int = 1  # how many: a job slower than a stack's lifetime keeps one retiring longer


@dataclass(frozen=True)
class Draining:
    """A maintenance is due: no claims; it runs once nothing is in flight."""

    kind: Kind
    reason: str


@dataclass(frozen=True)
class Stopping:
    kind: Kind
    reason: str
    since: datetime


@dataclass(frozen=True)
class Rebooting:
    """The reboot command is running."""

    reason: str


@dataclass(frozen=True)
class AwaitingReboot:
    """The reboot command ran: the machine should go down before ``deadline``."""

    deadline: datetime


@dataclass(frozen=True)
class Failing:
    """The stack would not start: no browser jobs until the next try at ``retry_at``."""

    failures: int  # in a row
    reason: str
    retry_at: datetime


@dataclass(frozen=True)
class Closed:
    """The consumer is stopping: nothing more happens to the stack."""


Phase = (
    Idle
    | Starting
    | Ready
    | Replacing
    | Draining
    | Stopping
    | Rebooting
    | AwaitingReboot
    | Failing
    | Closed
)


@dataclass(frozen=True)
class Faults:
    """What the job threads saw of the stack since it started."""

    releases: int = 0  # browser jobs released in a row
    unseen_release: bool = False  # a release the supervisor has not looked into yet
    abandoned: tuple[tuple[int, datetime], ...] = ()  # timed-out job, when its browser died

    def returned(self, event: JobReturned) -> Faults:
        abandoned = any(job_id == event.job_id for job_id, _ in self.abandoned)
        left = tuple(entry for entry in self.abandoned if entry[0] != event.job_id)
        if not event.browser or abandoned:  # a killed session's error says nothing of the stack
            return replace(self, abandoned=left)
        if event.slow:  # a host too busy to answer in time: fewer jobs, not a restart
            return replace(self, abandoned=left)
        if event.released:
            return replace(self, releases=self.releases + 1, unseen_release=True, abandoned=left)
        return replace(self, releases=0, abandoned=left)

    def hung_job(self, now: datetime, grace_s: float) -> int | None:
        """A timed-out job whose thread is still busy ``grace_s`` after its browser died."""
        for job_id, at in self.abandoned:
            if (now - at).total_seconds() > grace_s:
                return job_id
        return None


@dataclass(frozen=True)
class StackState:
    policy: Policy
    phase: Phase = Idle()
    faults: Faults = Faults()
    since_boot: int = 0  # the host's browser jobs since boot, as of the last claim
    reboot_base: int = 0  # since_boot when this consumer last decided a reboot
    skip_warned: bool = False  # the missing reboot command has been warned about
    retiring: Retiring | None = None
    lifetime_since: datetime | None = None  # when the running stack began to take jobs
    start_s: float = FIRST_START_GUESS_S  # how long the last stack took to start


# -- what the daemon reads ------------------------------------------------------------------


def is_running(state: StackState) -> bool:
    """A stack is up and checked: sessions may be asked for."""
    return isinstance(state.phase, Ready | Replacing | Draining)


def claim_budget(
    state: StackState, free: int, since_restart: int, since_boot: int
) -> tuple[int, int]:
    """(jobs, of which browser jobs) that may be claimed now out of ``free`` slots. The budgets
    cap browser jobs only; a failing stack takes none."""
    policy = state.policy

    def under_budgets(since_restart: int) -> int:
        since_reboot = since_boot - state.reboot_base
        return claims_allowed(
            since_restart, since_reboot, policy.restart_every, policy.reboot_every, free, 0
        )

    match state.phase:
        case Idle():  # no stack yet: its lifetime begins with this claim
            # A reboot budget spent before this consumer started is decided at the first claim.
            restart_only = claims_allowed(0, 0, policy.restart_every, 0, free, 0)
            return free, under_budgets(0) or restart_only
        case Ready():
            return free, under_budgets(since_restart)
        case Failing() | Replacing():
            return free, 0
    return 0, 0


def maintenance_state(state: StackState) -> str | None:
    """'restarting' or 'rebooting' while one is due or under way (the host's own state)."""
    match state.phase:
        case Draining(kind=kind) | Stopping(kind=kind):
            return HostState.REBOOTING if kind is Kind.REBOOT else HostState.RESTARTING
        case Rebooting() | AwaitingReboot():
            return HostState.REBOOTING
        case Starting(cause=StartCause.RESTART):
            return HostState.RESTARTING
    return None


def browser_status(state: StackState) -> tuple[BrowserState, str | None, datetime | None]:
    """(what the stack can do, why not, next try) for the status document."""
    match state.phase:
        case (
            Failing(reason=reason, retry_at=retry_at)
            | Starting(retrying=Failing(reason=reason, retry_at=retry_at))
        ):  # no browser jobs for a host trying again until it has succeeded
            return BrowserState.FAILING, reason, retry_at
        case Starting() | Draining() | Stopping() | Rebooting():
            return BrowserState.STARTING, None, None
        case Ready() | Replacing():  # a replacement is up in seconds: keep jobs coming
            return BrowserState.READY, None, None
    return BrowserState.IDLE, None, None


def next_check_s(state: StackState, now: datetime) -> float:
    """How soon a Tick has something to do without being woken."""
    waits = [state.policy.hung_grace_s / 4]
    match state.phase:
        case Failing(retry_at=at) | AwaitingReboot(deadline=at):
            waits.append((at - now).total_seconds())
    return max(MIN_CHECK_S, min(waits))
