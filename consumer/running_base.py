"""What every part of a running consumer holds, declared once.

consumer.serving.RunningConsumer is put together from parts named for their job
(consumer.claiming, consumer.attempt_endings, consumer.heartbeat, consumer.stopping); each part
reads the fields declared here and calls the few methods another part provides. The fields are
set by RunningConsumer.__init__ only.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Engine

from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.common.store.attempts import AttemptKey
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.browser.block_detection import BlockRules
from scrapefleet.consumer.browser.stack_supervisor import StackSupervisor
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.poll_schedule import PollSchedule
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.status_writer import StatusReporter


class RunningBase:
    config: ConsumerConfig
    settings: Settings
    engine: Engine
    host: str
    lifecycle: Lifecycle
    capacity: int  # the host row's, not the setting's
    attempts: InFlightAttempts  # in flight, given up, and the counters beside them
    recorder: OutcomeRecorder
    reporter: StatusReporter
    supervisor: StackSupervisor | None
    threads: SideThreads
    executor: ThreadPoolExecutor  # the job threads
    _block_rules: BlockRules
    _statements: StatementConnection
    _lease: AttemptLease
    _wake: threading.Event  # the claiming thread looks again
    _closed: threading.Event  # set last: the heartbeat stops
    # Without a LISTEN connection, claims follow a schedule (consumer.poll_schedule); its own
    # lock, as the recorder's thread moves it too.
    _poll: PollSchedule | None
    _poll_lock: threading.Lock
    # The host's state in the database as last learnt, set by the heartbeat and by the stack
    # supervisor's thread (under the lock); read without it (one value, replaced whole).
    _db_state: str
    _db_state_lock: threading.Lock
    _published: tuple[object, ...] | None  # what _publish_if_changed last saw
    _slow_light_kinds: set[str]  # warned about (_run_light); the claiming thread's only

    # Provided by the parts (one each), called by the others.
    @property
    def state(self) -> str:
        raise NotImplementedError

    def _release_fenced(self) -> None:
        raise NotImplementedError

    def _publish_status(self) -> None:
        raise NotImplementedError

    def _claim_soon(self) -> None:
        raise NotImplementedError

    def _on_outcomes_written(self) -> None:
        raise NotImplementedError

    def _confirm_ended(self) -> None:
        raise NotImplementedError

    def _end_attempt(self, job: ClaimedJob) -> None:
        raise NotImplementedError

    def _expire_timed_out(self) -> None:
        raise NotImplementedError

    def _fence_if_lapsed(self) -> None:
        raise NotImplementedError

    def _give_up(self, attempts: frozenset[AttemptKey]) -> None:
        raise NotImplementedError
