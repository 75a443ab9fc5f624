"""What every part of the producer holds, declared once.

producer.producer_daemon.Producer is the daemon (its scheduler, wake listener and stop) around
producer.producer_cycle (one cycle: the lead, the full cycle's probe, health and rescue), which
reads the fields declared here; the assignment every cycle ends with is an object of its own
(producer.assigning.assignment_step.AssignmentStep), given what it needs when it is built. The
fields are set by Producer.__init__ only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy.engine import Engine

from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.runtime.sd_notify import Notifier
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.producing.fleet import ProducerIdentity
from scrapefleet.producer.assigning.assignment_report import AssignmentTally
from scrapefleet.producer.assigning.assignment_step import AssignmentStep
from scrapefleet.producer.assigning.rate_steps import RateControl
from scrapefleet.producer.leader import LeaderSession
from scrapefleet.producer.probes.local_probe import Probe
from scrapefleet.producer.probes.recent_probes import Probed
from scrapefleet.producer.probes.start_grace import StartGrace


class ProducerBase:
    settings: Settings
    identity: ProducerIdentity
    lifecycle: Lifecycle
    _engine: Engine
    _probe: Probe
    _leader: LeaderSession
    _probed: dict[str, Probed]  # the last full cycle's probe results
    _kinds: dict[str, frozenset[str]]  # what each host runs, as last probed
    _cycle_lock: threading.Lock  # one cycle at a time, full or wake
    _standby_logged: bool
    _rates: RateControl
    _assignment: AssignmentStep  # the cycle's last step
    _assignments: AssignmentTally  # said once a minute, not once a cycle
    _monotonic: Callable[[], float]
    _start_grace: StartGrace
    _systemd: Notifier  # READY, WATCHDOG per full cycle, STOPPING: when systemd asks
    # Figures for tests, benchmarks and the debug log.
    last_cycle_duration_s: float
    last_full_cycle_duration_s: float | None  # the leader's, for its row
    last_assigned: int
    total_assigned: int
    cycles: int

    @property
    def is_leader(self) -> bool:
        return self._leader.is_leader
