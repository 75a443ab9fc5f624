"""What the owner of a session pool reads of it (the stack supervisor's claims and status, the
benchmarks, the tests): counts of its slots by state, read under the pool's lock; nothing here
changes a slot. The base class of consumer.browser.sessions.session_pool.SessionPool."""

from __future__ import annotations

import threading

from scrapefleet.consumer.browser.sessions.session_slots import Slot, SlotState


class SessionPoolViews:
    _cond: threading.Condition
    _slots: list[Slot]
    _peak_leased: int

    @property
    def sessions_alive(self) -> int:
        """Sessions the pool holds now (leased, idle or being prepared)."""
        with self._cond:
            return sum(1 for slot in self._slots if slot.driver is not None)

    @property
    def peak_leased(self) -> int:
        """The most leases this pool has given at once: as many sessions as its jobs needed."""
        with self._cond:
            return self._peak_leased

    @property
    def prepared(self) -> int:
        """Idle slots with a context open for the next job."""
        with self._cond:
            return sum(1 for slot in self._slots if slot.state is SlotState.IDLE and slot.ready)

    @property
    def idle_sessions(self) -> int:
        with self._cond:
            return sum(1 for s in self._slots if s.state is SlotState.IDLE and s.driver is not None)

    @property
    def leased(self) -> int:
        with self._cond:
            return sum(1 for slot in self._slots if slot.state is SlotState.LEASED)

    def session_ids(self) -> list[str]:
        with self._cond:
            return [str(s.driver.session_id) for s in self._slots if s.driver is not None]
