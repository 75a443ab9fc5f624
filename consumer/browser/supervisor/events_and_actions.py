"""What the browser stack's state machine (consumer.browser.supervisor.states) hears and asks for.

Events come from the daemon's loops and job threads and from the outcomes of earlier actions;
actions are what consumer.browser.supervisor.stack_supervisor carries out for it. All are plain
frozen values, so a test compares them with ``==``. An action whose outcome matters (starting,
stopping, a health check, the reboot command) is answered by the supervisor with the event its
docstring names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapefleet.common.store.statuses import HostState

# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    """Jobs were claimed; the counters are the host row's after the claim."""

    browser_jobs: int
    since_restart: int
    since_boot: int


@dataclass(frozen=True)
class JobReturned:
    job_id: int
    browser: bool
    released: bool  # handed back because of the stack (no session, session lost)
    slow: bool = False  # released because a Grid call timed out: slowness, not a fault


@dataclass(frozen=True)
class JobAbandoned:
    """The job is past its timeout: its browser is to be killed so that its thread returns."""

    job_id: int
    browser: bool


@dataclass(frozen=True)
class Tick:
    """The main loop's turn: jobs in flight, outcomes not yet written; of the browser jobs in
    flight, those still on a stack that an overlapped restart retired; how many retired stacks
    have no job left (one can be done while another still runs a long job)."""

    busy: int
    unwritten: int
    browser_busy: int
    retiring_busy: int = 0
    retiring_done: int = 0


@dataclass(frozen=True)
class HealthChecked:
    healthy: bool


@dataclass(frozen=True)
class StartSucceeded:
    pss_bytes: int = 0  # measured when StartStack asked for it


@dataclass(frozen=True)
class StartFailed:
    error: str


@dataclass(frozen=True)
class StackStopped:
    killed: int = 0
    sigkilled: int = 0
    leftover_pids: tuple[int, ...] = ()
    pss_before_bytes: int = 0  # measured when StopStack asked for it


@dataclass(frozen=True)
class NextStackStarted:
    """The next stack of an overlapped restart is up and checked with a session."""

    pss_old_bytes: int = 0  # the running stack's, measured at the same moment
    pss_new_bytes: int = 0


@dataclass(frozen=True)
class NextStackFailed:
    error: str


@dataclass(frozen=True)
class OldStacksStopped:
    """The retired stacks with no job left are stopped (their processes verified gone, or
    listed); ``remaining``: retired since, still running jobs."""

    stopped: StackStopped
    remaining: int = 0


@dataclass(frozen=True)
class RebootCommandRan:
    pass


@dataclass(frozen=True)
class RebootCommandFailed:
    reason: str


@dataclass(frozen=True)
class Close:
    pass


Event = (
    Claimed
    | JobReturned
    | JobAbandoned
    | Tick
    | HealthChecked
    | StartSucceeded
    | StartFailed
    | StackStopped
    | NextStackStarted
    | NextStackFailed
    | OldStacksStopped
    | RebootCommandRan
    | RebootCommandFailed
    | Close
)


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartStack:
    """Start the stack and check it with one real session -> StartSucceeded | StartFailed."""

    measure_memory: bool = False


@dataclass(frozen=True)
class StopStack:
    """Stop every process of the stack -> StackStopped."""

    measure_memory: bool = False


@dataclass(frozen=True)
class StartNextStack:
    """Start another stack (its own display, port, HOME and TMPDIR) beside the running one,
    in the background -> NextStackStarted | NextStackFailed."""


@dataclass(frozen=True)
class SwitchStacks:
    """New leases go to the next stack from now on; the running one retires: its idle
    sessions end at once, its in-flight jobs finish on it."""


@dataclass(frozen=True)
class StopOldStacks:
    """Stop the retired stacks, in the background -> OldStacksStopped."""


@dataclass(frozen=True)
class CheckHealth:
    """Is the Grid up and ready? -> HealthChecked."""


@dataclass(frozen=True)
class RunRebootCommand:
    """-> RebootCommandRan | RebootCommandFailed."""

    command: str


@dataclass(frozen=True)
class EndSession:
    """Kill the browser of this job's session, if it has one."""

    job_id: int


@dataclass(frozen=True)
class SetStackCounter:
    """Tell the daemon the stack's job counter (it caps the next claims)."""

    jobs: int


@dataclass(frozen=True)
class Log:
    level: int
    message: str


@dataclass(frozen=True)
class SetHostState:
    """Move the host row (only from one of ``expected``); the daemon learns it."""

    to_state: str
    reason: str
    expected: tuple[str, ...]


@dataclass(frozen=True)
class RecordStackStart:
    """A stack started where none ran: its lifetime begins with ``jobs_in_flight``."""

    jobs_in_flight: int
    reason: str
    duration_s: float

    @property
    def details(self) -> dict[str, Any]:
        return {"reason": self.reason, "duration_s": self.duration_s}


@dataclass(frozen=True)
class RecordRestart:
    reason: str
    duration_s: float
    stopped: StackStopped
    pss_after_bytes: int

    @property
    def details(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "duration_s": self.duration_s,
            "pss_before_bytes": self.stopped.pss_before_bytes,
            "pss_after_bytes": self.pss_after_bytes,
            "killed": self.stopped.killed,
            "sigkilled": self.stopped.sigkilled,
            "leftover_pids": list(self.stopped.leftover_pids),
        }


@dataclass(frozen=True)
class RecordStackFailure:
    """The stack would not start; the host's queued browser jobs go back to pending."""

    reason: str
    failures_in_a_row: int
    retry_in_s: float

    @property
    def details(self) -> dict[str, Any]:
        return {"failures_in_a_row": self.failures_in_a_row, "retry_in_s": self.retry_in_s}


@dataclass(frozen=True)
class RecordRebootRequest:
    """The reboot command is about to run; the host's queued jobs go back to pending."""

    reason: str


@dataclass(frozen=True)
class RecordHostEvent:
    event: str
    message: str


@dataclass(frozen=True)
class RecordStackSwitch:
    """An overlapped restart: the next stack takes the claims, the job counter starts again.
    ``no_claim_s``: how long browser jobs could not be claimed for it (from the budget spent
    to the switch; other jobs are claimed throughout)."""

    reason: str
    no_claim_s: float
    pss_before_bytes: int
    pss_after_bytes: int

    @property
    def details(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "overlapped": True,
            "no_claim_s": self.no_claim_s,
            "pss_before_bytes": self.pss_before_bytes,
            "pss_after_bytes": self.pss_after_bytes,
        }


@dataclass(frozen=True)
class RecordStackRetired:
    """The stack an overlapped restart replaced is stopped, after its last job."""

    stopped: StackStopped
    waited_s: float  # from the switch to the stop: its in-flight jobs finishing

    @property
    def details(self) -> dict[str, Any]:
        return {
            "waited_s": self.waited_s,
            "killed": self.stopped.killed,
            "sigkilled": self.stopped.sigkilled,
            "leftover_pids": list(self.stopped.leftover_pids),
        }


Record = (
    SetHostState
    | RecordStackStart
    | RecordRestart
    | RecordStackSwitch
    | RecordStackRetired
    | RecordStackFailure
    | RecordRebootRequest
    | RecordHostEvent
)
Action = (
    StartStack
    | StopStack
    | StartNextStack
    | SwitchStacks
    | StopOldStacks
    | CheckHealth
    | RunRebootCommand
    | EndSession
    | SetStackCounter
    | Log
    | Record
)
Actions = tuple[Action, ...]

# The host takes work again after a maintenance (not when an operator chose another state).
SET_ACTIVE = SetHostState(
    HostState.ACTIVE, "browser stack ready", (HostState.RESTARTING, HostState.REBOOTING)
)
