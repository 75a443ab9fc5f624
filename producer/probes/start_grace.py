"""Which failed probes count: none, for a while, of a host that has not answered this producer.

A producer started beside its consumers probes them before they have written their first
status document. Counted, those failures take every host offline a few seconds after start and
write "probe failed" and "active -> offline" into each host's history for good, though nothing
was wrong. So for ``grace_s`` after this producer takes the lead, the failed probe of a host
that has not answered it yet is not recorded (no count, no event, no state change); the host
gets no job meanwhile anyway (the planner needs a successful probe). A host that has answered
once is counted at once: its failures are news. After the grace every failure counts, and a
host that never answered goes offline ``probe_failures_offline`` rounds later.

Pure: the daemon passes the time (monotonic seconds) and the round's results.
"""

from __future__ import annotations

from collections.abc import Mapping

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import HostStatus


class StartGrace:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._lead_at: float | None = None
        self._answered: set[str] = set()  # hosts that answered this process at least once

    def lead_taken(self, now: float) -> None:
        self._lead_at = now

    def within(self, now: float) -> bool:
        return self._lead_at is not None and now - self._lead_at < self.grace_s

    def counted(
        self, results: Mapping[str, HostStatus | ProbeError], now: float
    ) -> tuple[dict[str, HostStatus | ProbeError], list[str]]:
        """The results to record, and the names of the hosts whose failure is held back."""
        self._answered.update(n for n, r in results.items() if isinstance(r, HostStatus))
        if not self.within(now):
            return dict(results), []
        held = [n for n, r in results.items() if not isinstance(r, HostStatus)]
        held = [n for n in held if n not in self._answered]
        return {n: r for n, r in results.items() if n not in held}, held
