"""The producer's background jobs beside assignment: webhooks, retention, schedules, metrics.

Each runs on its own APScheduler interval job (max one instance, coalesced), off the
assignment cycle and on pooled connections, never the leader's: a slow receiver or a long
archive run cannot delay an assignment. Webhooks, retention and firing schedules run on the
leading producer only (a standby that still believes it leads cannot fire a slot twice: the
database keeps each to one run, producer.background.schedule_firing); the metrics refresh runs on
every producer (a standby's endpoint shows the fleet too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from sqlalchemy.engine import Engine

from scrapefleet.common.db.engines import wrapped_errors
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.reads import producer_status
from scrapefleet.common.runtime.metrics import PRODUCER_REGISTRY, MetricsServer, serve_metrics
from scrapefleet.common.settings import Settings
from scrapefleet.producer.background.fleet_metrics import refresh_fleet_metrics
from scrapefleet.producer.background.retention_sweep import run_retention
from scrapefleet.producer.background.schedule_firing import fire_due
from scrapefleet.producer.webhooks.webhook_sender import WebhookSender

log = logging.getLogger(__name__)


class OperatorJobs:
    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        is_leader: Callable[[], bool],
        name: str = "producer",
    ) -> None:
        self._engine = engine
        self._name = name  # this producer in schedule_runs.fired_by
        self._settings = settings
        self._is_leader = is_leader
        self._sender: WebhookSender | None = None
        self.metrics_server: MetricsServer | None = None

    def start(self, scheduler: BaseScheduler) -> None:
        settings = self._settings
        self.metrics_server = serve_metrics(
            settings.metrics_address, settings.metrics_port, PRODUCER_REGISTRY
        )
        if self.metrics_server is not None:
            log.info(
                "metrics on http://%s:%d/metrics",
                self.metrics_server.address,
                self.metrics_server.port,
            )
            self._every(scheduler, settings.metrics_refresh_s, self.refresh_metrics, "metrics")
        if settings.webhook_secret is None:
            self._warn_unsent_webhooks()
        else:
            self._sender = WebhookSender(self._engine, settings)
            # A queued delivery wakes a round at once (while leading); the interval stays as
            # the fallback for a NOTIFY lost across a reconnect.
            self._sender.listen(self._is_leader)
            self._every(scheduler, settings.webhook_interval_s, self.deliver_webhooks, "webhooks")
        self._every(scheduler, settings.retention_interval_s, self.retention, "retention")
        # A slot fires within one interval of its time.
        self._every(scheduler, settings.producer_interval_s, self.fire_schedules, "schedules")

    def _warn_unsent_webhooks(self) -> None:
        """At every start without a secret: say what waits because of it, so that webhooks
        nobody receives do not go unnoticed (status and the dashboard say so too)."""
        try:
            with wrapped_errors(), self._engine.connect() as conn:
                deliveries = producer_status.unsent_webhooks(conn)
                callbacks = producer_status.unfinished_callback_jobs(conn)
        except Exception as exc:
            log.warning("webhook_secret is not set: webhooks are not sent (%s)", first_line(exc))
            return
        if deliveries or callbacks:
            log.warning(
                "webhook_secret is not set: %d webhook deliveries queued and %d unfinished jobs"
                " with a callback_url will not be sent; set webhook_secret and restart",
                deliveries,
                callbacks,
            )
        else:
            log.info("webhook_secret is not set: webhooks are off")

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None

    # -- the jobs: each logs and swallows its failure, the next tick tries again ------------

    def refresh_metrics(self) -> None:
        self._guarded("metrics refresh", lambda: refresh_fleet_metrics(self._engine))

    def deliver_webhooks(self) -> None:
        if self._sender is not None and self._is_leader():
            # pump, never deliver_due: the interval takes what is due and never waits for POSTs
            self._guarded("webhook pump", self._sender.pump)

    def retention(self) -> None:
        if self._is_leader():
            self._guarded("retention", lambda: run_retention(self._engine, self._settings))

    def fire_schedules(self) -> None:
        if self._is_leader():
            self._guarded(
                "schedules",
                lambda: fire_due(
                    self._engine, datetime.now(UTC), self._name, self._settings.max_attempts
                ),
            )

    @staticmethod
    def _guarded(what: str, run: Callable[[], Any]) -> None:
        try:
            run()
        except Exception as exc:
            log.warning("%s failed, retrying next time: %s", what, first_line(exc))

    @staticmethod
    def _every(
        scheduler: BaseScheduler, seconds: float, func: Callable[[], None], name: str
    ) -> None:
        scheduler.add_job(
            func,
            "interval",
            seconds=seconds,
            id=f"producer-{name}",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
