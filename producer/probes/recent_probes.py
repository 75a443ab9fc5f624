"""The last full cycle's probe results, kept for the wake cycles between probes, and their
running counts brought up to date from the database's.

Apart from the cycle because it is a pure function of what was probed and what the database
counts now: the assignment step calls it every cycle, and a unit test checks it without a
producer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import HostStatus


@dataclass(frozen=True)
class Probed:
    result: HostStatus | ProbeError
    in_flight_at_probe: int  # the database's count read just before the probe


def current_probes(
    last_probes: Mapping[str, Probed], in_flight: Mapping[str, int]
) -> dict[str, HostStatus | ProbeError]:
    """The last probe results, their running counts brought up to date.

    Between probes the database's count is fresh and the probe's is not. What the probe
    adds is the jobs a host runs beyond what the database gives it (a job past its timeout
    or rescued, still running there): its ``stuck`` count. Keep that on top of today's
    count, so a slot freed since the probe is refilled now, not at the next tick. A
    consumer too old to report ``stuck``: the excess of its running count over the
    database's count at the probe.
    """
    current: dict[str, HostStatus | ProbeError] = {}
    for name, probed in last_probes.items():
        result = probed.result
        if isinstance(result, HostStatus):
            excess = (
                result.stuck
                if result.stuck is not None
                else max(0, result.running - probed.in_flight_at_probe)
            )
            result = replace(result, running=in_flight.get(name, 0) + excess)
        current[name] = result
    return current
