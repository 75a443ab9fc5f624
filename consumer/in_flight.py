"""What one consumer has in flight: its attempts by (job id, claim), and the counters beside them.

Its own object with its own lock, because five threads touch it: the claiming thread (claims,
light jobs, timeouts), the job threads (cancellers, their return), the recorder's thread (an
outcome written), the heartbeat (the running list, a lapsed lease, attempts stopped elsewhere)
and the stop. Every method takes the lock once and does one whole step, so that no caller ever
sees an attempt counted twice or not at all; nothing slow (I/O, callbacks) runs under it.

An attempt is in flight from its claim until its thread returns it, unless it is given up first
(timed out, stopped or rescued elsewhere, fenced by a lapsed lease, let go by a cold stop): a
given-up attempt's thread still runs, so its slot stays taken and its job is not claimed again
here until it returns; its end is then confirmed to the database (which frees its lock key),
after the failure or release that makes its key linger, if one is owed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from scrapefleet.common.http.request_cancel import RequestCanceller
from scrapefleet.common.store import ClaimedJob
from scrapefleet.common.store.consuming.attempts import AttemptKey


@dataclass(frozen=True)
class InFlight:
    job: ClaimedJob
    started: float  # time.monotonic()
    limit_s: float  # its attempt's time limit (consumer.claiming.time_limit_s)

    @property
    def deadline(self) -> float:
        return self.started + self.limit_s


@dataclass(frozen=True)
class ClaimRoom:
    """What a claim may take now, read in one look."""

    free: int  # slots
    since_restart: int
    since_boot: int
    browser_busy: int  # browser jobs in flight
    running_here: list[int]  # job ids of given-up attempts whose threads still run


@dataclass(frozen=True)
class Counts:
    running: int  # in flight plus given up (busy threads)
    stuck: int  # given up, thread still running
    since_restart: int
    since_boot: int


class InFlightAttempts:
    def __init__(self, since_restart: int, since_boot: int) -> None:
        self._lock = threading.Lock()  # guards everything below
        self._in_flight: dict[AttemptKey, InFlight] = {}
        # Given up here (timed out, rescued, stopped, let go) while their threads still run.
        self._given_up: dict[AttemptKey, ClaimedJob] = {}
        # Given-up attempts whose threads returned, not yet confirmed to the database.
        self._ended: set[AttemptKey] = set()
        self._cancellers: dict[AttemptKey, RequestCanceller] = {}  # of attempts running now
        # Ended here because no heartbeat reached the database for too long (the lease
        # lapsed), still the database's to release once it answers again.
        self._fenced: dict[AttemptKey, ClaimedJob] = {}
        # Timed out, their failure (which makes their lock key linger) not written yet: their
        # end is confirmed only after it.
        self._linger_owed: set[AttemptKey] = set()
        self._more_queued = False  # jobs were left queued: claim again when a slot frees
        self._since_restart = since_restart  # the host row's counters, as of the last claim
        self._since_boot = since_boot

    # -- reading ------------------------------------------------------------------------

    def counts(self) -> Counts:
        with self._lock:
            stuck = len(self._given_up)
            return Counts(
                len(self._in_flight) + stuck, stuck, self._since_restart, self._since_boot
            )

    @property
    def running(self) -> int:
        return self.counts().running

    @property
    def stuck(self) -> int:
        return self.counts().stuck

    @property
    def busy(self) -> int:
        """Attempts in flight (not given up)."""
        with self._lock:
            return len(self._in_flight)

    def busy_and_browser(self) -> tuple[int, int]:
        """Attempts in flight, and the browser jobs among them."""
        with self._lock:
            return len(self._in_flight), self._browser_busy()

    @property
    def more_queued(self) -> bool:
        with self._lock:
            return self._more_queued

    def keys(self) -> list[AttemptKey]:
        """The attempts in flight, for the heartbeat."""
        with self._lock:
            return list(self._in_flight)

    def soonest_deadline(self) -> float:
        """When the first attempt in flight times out (time.monotonic()); inf if none."""
        with self._lock:
            return min((r.deadline for r in self._in_flight.values()), default=math.inf)

    # -- claims ---------------------------------------------------------------------------

    def room(self, capacity: int, unwritten: int) -> ClaimRoom | None:
        """What a claim may take out of ``capacity``, ``unwritten`` outcomes still holding
        their slots; None (and more work noted as queued) when no slot is free."""
        with self._lock:
            free = capacity - len(self._in_flight) - len(self._given_up) - unwritten
            if free <= 0:
                self._more_queued = True
                return None
            return ClaimRoom(
                free,
                self._since_restart,
                self._since_boot,
                self._browser_busy(),
                [job_id for job_id, _ in self._given_up],
            )

    def claimed(
        self,
        jobs: Sequence[ClaimedJob],
        started: float,
        limit_s: Callable[[ClaimedJob], float],
        *,
        since_restart: int,
        since_boot: int,
        more: bool,
    ) -> int:
        """A claim's jobs are in flight from ``started``; the attempts in flight now."""
        with self._lock:
            self._since_restart, self._since_boot = since_restart, since_boot
            self._more_queued = more
            for job in jobs:
                self._in_flight[job.key] = InFlight(job, started, limit_s(job))
            return len(self._in_flight)

    def restamp(self, jobs: Iterable[ClaimedJob], now: float) -> None:
        """Their time runs from ``now`` (not while the stack was starting for them)."""
        with self._lock:
            for job in jobs:
                if job.key in self._in_flight:
                    limit_s = self._in_flight[job.key].limit_s
                    self._in_flight[job.key] = InFlight(job, now, limit_s)

    def set_since_restart(self, count: int) -> None:
        with self._lock:
            self._since_restart = count

    # -- attempts running ---------------------------------------------------------------

    def add_canceller(self, key: AttemptKey, canceller: RequestCanceller) -> None:
        with self._lock:
            self._cancellers[key] = canceller

    def drop_canceller(self, key: AttemptKey) -> None:
        with self._lock:
            self._cancellers.pop(key, None)

    def canceller(self, key: AttemptKey) -> RequestCanceller | None:
        with self._lock:
            return self._cancellers.get(key)

    def returned(self, jobs: Iterable[ClaimedJob]) -> tuple[list[ClaimedJob], list[ClaimedJob]]:
        """Their threads returned: (still ours, their outcome to record; given up meanwhile,
        their outcome dropped and their end to confirm)."""
        ours: list[ClaimedJob] = []
        late: list[ClaimedJob] = []
        with self._lock:
            for job in jobs:
                if self._in_flight.pop(job.key, None) is not None:
                    ours.append(job)
                else:
                    self._given_up.pop(job.key, None)
                    self._ended.add(job.key)
                    late.append(job)
        return ours, late

    # -- giving up ------------------------------------------------------------------------

    def expire(self, now: float) -> list[InFlight]:
        """The attempts past their deadline, given up; their failure is owed."""
        with self._lock:
            expired = [r for r in self._in_flight.values() if now >= r.deadline]
            for running in expired:
                del self._in_flight[running.job.key]
                self._given_up[running.job.key] = running.job
                self._linger_owed.add(running.job.key)
        return expired

    def give_up(self, keys: Iterable[AttemptKey]) -> list[InFlight]:
        """Those of ``keys`` in flight, given up (no longer this host's in the database)."""
        with self._lock:
            gone = [self._in_flight.pop(k) for k in keys if k in self._in_flight]
            for running in gone:
                self._given_up[running.job.key] = running.job
        return gone

    def fence_all(self) -> list[ClaimedJob]:
        """Every attempt in flight, given up and owed a release (the lease lapsed)."""
        with self._lock:
            lost = [f.job for f in self._in_flight.values()]
            self._in_flight.clear()
            for job in lost:
                self._given_up[job.key] = job
                self._fenced[job.key] = job
        return lost

    def let_go_all(self) -> list[int]:
        """Cold stop: every attempt in flight given up; their job ids, sorted."""
        with self._lock:
            let_go = sorted(job_id for job_id, _ in self._in_flight)
            self._given_up.update((k, f.job) for k, f in self._in_flight.items())
            self._in_flight.clear()
        return let_go

    # -- what the database is still owed ------------------------------------------------

    def take_ended(self) -> list[AttemptKey]:
        """The ended attempts whose end may be confirmed now (none still owed a release or a
        written failure), taken: ``put_back_ended`` if the confirmation failed."""
        with self._lock:
            ended = sorted(
                k for k in self._ended if k not in self._fenced and k not in self._linger_owed
            )
            self._ended.difference_update(ended)
        return ended

    def put_back_ended(self, keys: Iterable[AttemptKey]) -> None:
        with self._lock:
            self._ended.update(keys)

    def outcomes_written(self, jobs: Iterable[ClaimedJob]) -> bool:
        """These attempts' outcomes are in the database: True if one of them was owed its
        failure and has already ended (its end may be confirmed now)."""
        with self._lock:
            owed = {job.key for job in jobs} & self._linger_owed
            self._linger_owed -= owed
            return bool(owed & self._ended)

    def fenced(self) -> tuple[dict[AttemptKey, ClaimedJob], set[AttemptKey]]:
        """The attempts owed a release, and those of them whose threads still run."""
        with self._lock:
            owed = dict(self._fenced)
            return owed, {k for k in owed if k in self._given_up}

    def released(self, keys: Iterable[AttemptKey]) -> None:
        with self._lock:
            for key in keys:
                self._fenced.pop(key, None)

    def _browser_busy(self) -> int:
        """Browser jobs among those in flight (under self._lock)."""
        return sum(1 for f in self._in_flight.values() if f.job.needs_browser)
