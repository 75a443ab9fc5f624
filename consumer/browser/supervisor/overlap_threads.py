"""The stack supervisor's helper threads: an overlapped restart's next stack started and warmed
beside the running one, and retired stacks stopped once their last job has returned.

Threads because a start takes seconds (a JVM, Xvfb, Chromium, a first session) and a stop up to
its kill timeouts: on the supervisor's own thread they would hold up every claim and every job
return meanwhile.

A helper changes nothing of the supervisor's: the stacks a host holds
(consumer.browser.supervisor.held_stacks) have one writer, the supervisor's thread. A helper is
given what it needs when it is started, does its one slow thing, keeps what it did in its HelperRun
(``outcome``) and posts the run to that thread, which applies it (a next stack becomes the
host's next; stopped ones leave its retiring) and feeds the state machine the answer. A stop of
everything joins the helpers and applies their outcomes itself, before their posted runs get
their turn: a next stack just started is then stopped with the others, and a retired one is not
stopped twice; the posted run only feeds the answer it left (``answer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.consumer.browser.sessions.session_permits import SessionPermits
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, StopReport
from scrapefleet.consumer.browser.stack.launch import StackLauncher
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    Event,
    NextStackFailed,
    NextStackStarted,
    StackStopped,
)
from scrapefleet.consumer.browser.supervisor.held_stacks import Held, pss_bytes


@dataclass(frozen=True)
class NextStackUp:
    """The next stack, started and checked with a session; ``started``: the answer."""

    held: Held
    started: NextStackStarted


@dataclass(frozen=True)
class RetiredStopped:
    """Retired stacks stopped, and what each stop did."""

    stopped: tuple[Held, ...]
    reports: tuple[StopReport, ...]


Outcome = NextStackUp | NextStackFailed | RetiredStopped


class HelperRun:
    """One helper thread, and what it did. ``outcome`` is written by the helper only, before it
    posts the run; ``answer`` by the supervisor's thread only, when it applies the outcome."""

    def __init__(
        self,
        name: str,
        work: Callable[[], Outcome],
        threads: SideThreads,
        post: Callable[[HelperRun], None],
    ) -> None:
        self._work = work
        self._post = post
        self.outcome: Outcome | None = None
        self.answer: Event | None = None
        self.thread = threads.start(name, self._run, lasting=False)

    def _run(self) -> None:
        self.outcome = self._work()
        self._post(self)


def start_next(
    launcher: StackLauncher,
    work_dir: Path | None,
    running: BrowserStack,
    warm: int,
    permits: SessionPermits,
) -> Outcome:
    """A helper's work: the next stack in ``work_dir`` (None: no directory was free), with
    ``warm`` sessions more than its check's; its PSS and the ``running`` one's, side by side."""
    if work_dir is None:  # the state machine counts them too: should never happen
        return NextStackFailed("no free stack work directory")
    stack = launcher.make_stack(work_dir)
    started = launcher.start(stack, warm, permits)
    if isinstance(started, str):
        return NextStackFailed(started)
    return NextStackUp((stack, started), NextStackStarted(pss_bytes(running), pss_bytes(stack)))


def stop_retired(done: Sequence[Held]) -> Outcome:
    """A helper's work: stop the retired stacks ``done`` (their last job has returned)."""
    reports = []
    for stack, pool in done:
        pool.close()
        reports.append(stack.stop())
    return RetiredStopped(tuple(done), tuple(reports))


def combined(reports: Sequence[StopReport], pss_before_bytes: int = 0) -> StackStopped:
    """What stopping several stacks did, as one answer."""
    return StackStopped(
        sum(r.killed for r in reports),
        sum(r.sigkilled for r in reports),
        tuple(pid for r in reports for pid in r.leftover_pids),
        pss_before_bytes,
    )
