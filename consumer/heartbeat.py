"""What a running consumer tells and hears besides its claims: the heartbeat (its attempts and
host alive, the host state an operator chose), the LISTEN for assignments, and the status
document the producer's probes read.
"""

from __future__ import annotations

import logging
import time

from scrapefleet.common import store
from scrapefleet.common.db.channels import host_channels
from scrapefleet.common.db.engines import Listener, describe, sqlalchemy_url, transaction
from scrapefleet.common.db.pooler import listen_url
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.status.document import BrowserState
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.running_base import RunningBase
from scrapefleet.consumer.status_writer import Snapshot

# One logger for every part of the running consumer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.consumer.serving")

DB_RETRY_MAX_S = 10.0  # longest wait between attempts while the database is unreachable


class Heartbeat(RunningBase):
    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_s):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        # A lease that lapsed while this process could not run (frozen, starved) ends its
        # attempts before this heartbeat renews it: whether the producer rescued them meanwhile
        # or not, the rule is the same every time (the main loop's own check may come second).
        self._fence_if_lapsed()
        sent_at = time.monotonic()
        running = self.attempts.keys()
        self._release_fenced()
        self._confirm_ended()
        try:
            with transaction(self.engine) as conn:
                beat = store.heartbeat(conn, self.host, running)
        except Exception as exc:
            log.warning("heartbeat failed: %s", describe(exc))
            self._fence_if_lapsed()
        else:
            self._lease.renew(sent_at)
            self._give_up(beat.gone)
            state = beat.host_state
            if state is None:
                log.warning("host %s has no row in the database; not claiming", self.host)
                state = HostState.DISABLED
            with self._db_state_lock:  # the stack supervisor's thread sets it too
                before, self._db_state = self._db_state, state
            if state != before:
                log.info("host %s state %s -> %s", self.host, before, state)
                self._claim_soon()
        self.reporter.sample_system()
        self._publish_status()

    def _listen_loop(self) -> None:
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
                    self._wake.set()
        finally:
            listener.close()

    def _publish_status(self) -> None:
        self.reporter.publish(self._snapshot)

    def _publish_if_changed(self) -> None:
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
            self._publish_status()

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
