"""What the producer assigned, said once a minute instead of once a cycle.

A busy fleet assigns something at nearly every cycle (every 2 s by default): one INFO line per
cycle was almost the whole of a day's log. Each cycle's assignments are added to a tally, and
one INFO line sums them when a minute has passed since the last one:

    assigned jobs=412 in 60 s (30 cycles) hosts=h1:208,h2:204

Nothing assigned, nothing said. The per-cycle detail stays at DEBUG. Pure: the caller passes
the time (a monotonic clock) and logs what ``add`` returns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

REPORT_EVERY_S = 60.0


@dataclass
class AssignmentTally:
    every_s: float = REPORT_EVERY_S
    _per_host: Counter[str] = field(default_factory=Counter)
    _cycles: int = 0
    _since: float | None = None  # when the first cycle of this tally assigned something

    def add(self, hosts: list[str], now: float) -> str | None:
        """One cycle's assignments (a host name per job); the summary line when one is due."""
        if hosts:
            if self._since is None:
                self._since = now
            self._per_host.update(hosts)
            self._cycles += 1
        if self._since is None or now - self._since < self.every_s:
            return None
        line = (
            f"assigned jobs={sum(self._per_host.values())} in {now - self._since:.0f} s"
            f" ({self._cycles} cycles) hosts="
            + ",".join(f"{host}:{n}" for host, n in sorted(self._per_host.items()))
        )
        self._per_host.clear()
        self._cycles = 0
        self._since = None
        return line
