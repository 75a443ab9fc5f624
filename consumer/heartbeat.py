"""What a running consumer tells and hears besides its claims: the heartbeat (its attempts and
host alive, the host state an operator chose), the LISTEN for assignments, and the status
document the producer's probes read. Heartbeat and AssignmentListener each own their thread
(``heartbeat-<host>``, ``listen-<host>``); StatusPublisher is called from several threads and
writes through the reporter, which has its own lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.channels import host_channels
from scrapefleet.common.db.engines import Listener, sqlalchemy_url, transaction
from scrapefleet.common.db.pooler import listen_url
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.runtime.lifecycle import DaemonState, Lifecycle
from scrapefleet.common.settings import Settings
from scrapefleet.common.status.document import HOST_STATES, BrowserState
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.attempt_endings import AttemptEndings
from scrapefleet.consumer.attempt_lease import AttemptLease
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.running_state import NOT_CLAIMING_STATES, Clock, HostStateView, Wakeup
from scrapefleet.consumer.status_writer import Snapshot, StatusReporter

# One logger for every part of the running consumer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.consumer.serving")

DB_RETRY_MAX_S = 10.0  # longest wait between attempts while the database is unreachable


def reported_state(
    daemon: DaemonState, stopping: bool, db_state: str, maintenance: str | None
) -> str:
    """The host state a consumer reports in its status document: its own stop first; then the
    state in the database, but for 'offline' (the producer's verdict on reachability, while
    this consumer is alive and serving) and the stack's maintenance (restarting, rebooting)
    while the host claims."""
    if daemon is DaemonState.STOPPED:
        return HostState.OFFLINE
    if stopping:
        return HostState.DRAINING
    if db_state == HostState.OFFLINE or db_state not in HOST_STATES:
        return HostState.ACTIVE
    if maintenance and db_state not in NOT_CLAIMING_STATES:
        return maintenance
    return db_state


class Heartbeat:
    """The ``heartbeat-<host>`` thread: every ``heartbeat_s`` the attempts and the host alive,
    the host state learnt, what the database is owed, the status document."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        host: str,
        *,
        attempts: InFlightAttempts,
        lease: AttemptLease,
        endings: AttemptEndings,
        host_state: HostStateView,
        wakeup: Wakeup,
        reporter: StatusReporter,
        publish: Callable[[], None],
        closed: threading.Event,
        clock: Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.host = host
        self.attempts = attempts
        self._lease = lease
        self._endings = endings
        self._host_state = host_state
        self._wakeup = wakeup
        self.reporter = reporter
        self._publish_status = publish
        self._closed = closed  # set last at the stop: the loop ends
        self._clock = clock

    def loop(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_s):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        # A lease that lapsed while this process could not run (frozen, starved) ends its
        # attempts before this heartbeat renews it: whether the producer rescued them meanwhile
        # or not, the rule is the same every time (the main loop's own check may come second).
        self._endings.fence_if_lapsed()
        sent_at = self._clock()
        running = self.attempts.keys()
        self._endings.release_fenced()
        self._endings.confirm_ended()
        try:
            with transaction(self.engine) as conn:
                beat = store.heartbeat(conn, self.host, running)
        except Exception as exc:
            log.warning("heartbeat failed: %s", first_line(exc))
            self._endings.fence_if_lapsed()
        else:
            self._lease.renew(sent_at)
            self._endings.give_up(beat.gone)
            state = beat.host_state
            if state is None:
                log.warning("host %s has no row in the database; not claiming", self.host)
                state = HostState.DISABLED
            before = self._host_state.replace(state)  # the main thread sets it too
            if state != before:
                log.info("host %s state %s -> %s", self.host, before, state)
                self._wakeup.claim_soon()
        self.reporter.sample_system()
        self._publish_status()


class AssignmentListener:
    """The ``listen-<host>`` thread: LISTEN for assignments, wake the main thread."""

    def __init__(
        self, settings: Settings, engine: Engine, host: str, lifecycle: Lifecycle, wakeup: Wakeup
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.host = host
        self.lifecycle = lifecycle
        self._wakeup = wakeup

    def loop(self) -> None:
        direct = listen_url(self.settings, self.engine.url)
        assert direct is not None  # else this loop is not started
        url = sqlalchemy_url(direct).update_query_dict(
            {"application_name": f"scrapefleet-consumer {self.host} listen"}
        )
        listener = Listener(
            url.render_as_string(hide_password=False),
            [self.host],
            self.settings,
            resolve=host_channels,  # its channel's name carries the fleet's key
        )
        failures = 0
        try:
            while not self.lifecycle.stopping:
                try:
                    payloads = listener.wait(self.settings.consumer_poll_s)
                    failures = 0
                except DatabaseUnavailable:  # Listener logged it; the poll keeps us going
                    failures += 1
                    self.lifecycle.wait(
                        min(self.settings.consumer_poll_s * 2**failures, DB_RETRY_MAX_S)
                    )
                    continue
                if self.host in payloads:
                    self._wakeup.wake()
        finally:
            listener.close()


class StatusPublisher:
    """The status document the producer's probes read: what it says, and when it is rewritten
    (from any thread; the reporter writes under its own lock)."""

    def __init__(
        self,
        config: ConsumerConfig,
        capacity: int,
        *,
        lifecycle: Lifecycle,
        attempts: InFlightAttempts,
        host_state: HostStateView,
        supervisor: StackSupervisor | None,
        reporter: StatusReporter,
    ) -> None:
        self.config = config
        self.capacity = capacity
        self.lifecycle = lifecycle
        self.attempts = attempts
        self._host_state = host_state
        self.supervisor = supervisor
        self.reporter = reporter
        self._published: tuple[object, ...] | None = None  # the main thread's only

    @property
    def state(self) -> str:
        maintenance = self.supervisor.maintenance_state if self.supervisor is not None else None
        return reported_state(
            self.lifecycle.state, self.lifecycle.stopping, self._host_state.value, maintenance
        )

    def publish(self) -> None:
        self.reporter.publish(self._snapshot)

    def publish_if_changed(self) -> None:
        """Rewrite the document if what the producer decides on moved since the last look
        (the browser stack's state, say) between heartbeats; the running count alone never
        triggers a write."""
        seen = (
            self.state,
            self.attempts.stuck,
            self.lifecycle.state,
            *self._browser_status(),
            *self._browser_limit(),
        )
        if seen != self._published:
            self._published = seen
            self.publish()

    def _snapshot(self) -> Snapshot:
        limit, limit_reason = self._browser_limit()
        counts = self.attempts.counts()
        return Snapshot(
            counts.running,
            self.capacity,
            self.state,
            counts.since_restart,
            counts.since_boot,
            self.lifecycle.state.value,
            *self._browser_status(),
            stuck=counts.stuck,
            browser_limit=limit,
            browser_limit_reason=limit_reason,
        )

    def _browser_limit(self) -> tuple[int | None, str | None]:
        if self.supervisor is not None:
            return self.supervisor.browser_limit()
        return None, None

    def _browser_status(self) -> tuple[str, str | None, float | None]:
        if self.supervisor is not None:
            return self.supervisor.browser_status()
        if self.config.driver_factory is not None:  # the caller's own browsers
            return BrowserState.READY, None, None
        return BrowserState.ABSENT, "browser = false in this host's settings", None
