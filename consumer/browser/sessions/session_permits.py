"""Browser sessions capped across pools: a host's running stack and the next (or retiring)
one share ``capacity`` sessions during an overlapped restart, and an idle session of one pool
never holds up a lease of the other."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # consumer.browser.sessions.session_pool imports this module
    from scrapefleet.consumer.browser.sessions.session_pool import SessionPool

RECLAIM_AGAIN_S = 2.0


class SessionPermits:
    """At most ``limit`` browser sessions across the pools that share these permits (a host's
    running stack and the next or retiring one). An idle session never holds up a lease: a
    lease that finds every permit held asks another pool to quit one of its idle sessions and
    takes the permit that frees."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._reclaiming = 0  # idle sessions asked to quit, their permits not yet back
        self._asked_at = 0.0  # when a pool was last asked to give a session back
        self._interrupted = False
        self._cond = threading.Condition()
        self._pools: list[SessionPool] = []

    @property
    def held(self) -> int:
        with self._cond:
            return self._held

    def join(self, pool: SessionPool) -> None:
        with self._cond:
            self._pools.append(pool)

    def leave(self, pool: SessionPool) -> None:
        with self._cond:
            self._pools = [p for p in self._pools if p is not pool]

    def acquire(self, pool: SessionPool, timeout_s: float, reclaim: bool = True) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                if self._interrupted:
                    return False
                if self._held < self.limit:
                    self._held += 1
                    return True
                others = [p for p in self._pools if p is not pool] if reclaim else []
                # One ask at a time; asked again when the last has not freed one in a while
                # (its pool was closed, or the session it owed was taken by its own lease).
                stale = time.monotonic() - self._asked_at > RECLAIM_AGAIN_S
                ask = bool(others) and (not self._reclaiming or stale)
                if ask:
                    self._asked_at = time.monotonic()
            # Pools are asked outside our lock: a pool calls release() under its own.
            if ask and any(other.give_back() for other in others):
                with self._cond:
                    self._reclaiming += 1
            with self._cond:
                remaining = deadline - time.monotonic()
                if self._held < self.limit:
                    continue
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))

    @property
    def interrupted(self) -> bool:
        with self._cond:
            return self._interrupted

    def interrupt(self) -> None:
        """Every acquire, waiting or to come, fails at once (the host's stacks are stopping)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._held = max(self._held - 1, 0)
            self._reclaiming = max(self._reclaiming - 1, 0)
            self._cond.notify_all()
