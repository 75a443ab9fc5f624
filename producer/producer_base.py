"""What every part of the producer holds, declared once.

producer.assigner.Producer is put together from parts named for their job:
producer.producer_cycle (one cycle: the lead, the full cycle's probe, health and rescue) and
producer.assignment_step (what fits, assigned, every cycle); the daemon around them (its
scheduler, wake listener and stop) is producer.assigner's own. Each part reads the fields
declared here and calls the few methods another part provides. The fields are set by
Producer.__init__ only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy.engine import Engine

from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.runtime.sd_notify import Notifier
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.fleet import ProducerIdentity
from scrapefleet.producer.assignment_report import AssignmentTally
from scrapefleet.producer.leader import LeaderSession
from scrapefleet.producer.probe import Probe
from scrapefleet.producer.rate_steps import RateControl
from scrapefleet.producer.recent_probes import Probed
from scrapefleet.producer.start_grace import StartGrace


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
    _paused: bool  # as last read from fleet_control, to log changes once
    _rates: RateControl
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

    # Provided by a part, called by another.
    def _assign(self, *, record_cycle: bool = False) -> list[str]:
        raise NotImplementedError
