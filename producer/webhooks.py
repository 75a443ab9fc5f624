"""The producer's webhook sender: POST due deliveries, signed, and record how each went.

Rows come from the ``jobs_webhook_enqueue`` trigger (a job with a callback_url that completes
or fails), and each new row NOTIFYs CHANNEL_WEBHOOKS_DUE. A round runs when that NOTIFY arrives
(once ``listen`` is called) and at every ``webhook_interval_s`` (retries coming due, NOTIFYs
lost across a reconnect), on the producer and never on a consumer, one round at a time:
take the due rows (their attempt counted and a lease set, one short transaction), POST them in
parallel without holding any transaction, and record each outcome in its own short transaction
as soon as its POST ends (before that worker sends another): delivered, due again after a
backoff, or given up after ``webhook_max_attempts``. A slow receiver so delays no other
delivery's record, and a producer that stops mid-round loses at most the POSTs in flight. A
receiver may get an event twice (a response lost after it was handled) and dedupes on (job_id,
status) or the delivery id header; it never gets one it acknowledged again.

Each POST (producer/webhook_http.py) goes only to addresses the egress policy allows
(producer/egress.py) and ends by ``webhook_timeout_s`` whatever the receiver does. A POST the
policy refuses is given up at once: it would be refused the same way on every attempt, since the
allow-list is read once at start, and retrying it would only repeat the DNS lookup and the log
line ``webhook_max_attempts`` times. An operator who allows the address re-queues the row.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import metrics, store
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import (
    CHANNEL_WEBHOOKS_DUE,
    WEBHOOK_BATCH,
    WEBHOOK_WAKE_DEBOUNCE_S,
    WEBHOOK_WORKERS,
)
from scrapefleet.common.db import describe, transaction
from scrapefleet.common.logging_setup import fields
from scrapefleet.common.retry import backoff_delay_s
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import DueWebhook
from scrapefleet.common.webhook_signing import DELIVERY_HEADER, sign
from scrapefleet.producer import egress, webhook_http
from scrapefleet.producer.wakeup import WakeListener
from scrapefleet.producer.webhook_http import PostResult

log = logging.getLogger(__name__)

USER_AGENT = "scrapefleet-webhook/1"


@dataclass(frozen=True)
class DeliveryRound:
    delivered: int = 0
    failed: int = 0  # will be tried again
    gave_up: int = 0


def post_signed(
    url: str,
    body: bytes,
    *,
    secret: str,
    delivery_id: int,
    timeout_s: float,
    allowed: tuple[egress.Network, ...] = (),
    previous_secret: str | None = None,
) -> PostResult:
    """One signed POST; 2xx is delivered, anything else (a status, a refusal by the egress
    policy, the deadline) is a failure. A redirect is an answer too, never followed."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        DELIVERY_HEADER: str(delivery_id),
        **sign(secret, body, previous=previous_secret),
    }
    return webhook_http.post(url, body, headers, timeout_s=timeout_s, allowed=allowed)


def encode_body(payload: dict[str, object]) -> bytes:
    """The exact bytes that are signed and sent (compact, keys sorted: stable for receivers)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


class WebhookSender:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        if settings.webhook_secret is None:
            raise ValueError("webhook_secret is not set")
        self._engine = engine
        self._settings = settings
        self._secret = settings.webhook_secret.get_secret_value()
        previous = settings.webhook_secret_previous
        self._previous = previous.get_secret_value() if previous is not None else None
        self._allowed = egress.parse_networks(settings.webhook_allow_networks)
        self._pool = ThreadPoolExecutor(WEBHOOK_WORKERS, thread_name_prefix="webhook")
        self._round = threading.Lock()  # a woken round and an interval round never overlap
        self._stopping = threading.Event()
        self._wake: WakeListener | None = None

    def listen(self, is_leader: Callable[[], bool]) -> None:
        """Also run a round as soon as a delivery is enqueued (its NOTIFY), while ``is_leader()``
        says this producer is the one that sends."""

        def woken() -> None:
            if is_leader() and not self._stopping.is_set():
                try:
                    self.deliver_due()
                except Exception as exc:  # the next NOTIFY or interval round tries again
                    log.warning("webhook round failed, retrying next time: %s", describe(exc))

        if self._wake is not None:
            return
        self._wake = WakeListener(
            self._engine.url.render_as_string(hide_password=False),
            woken,
            debounce_s=WEBHOOK_WAKE_DEBOUNCE_S,
            retry_s=self._settings.webhook_interval_s,
            stopping=self._stopping,
            channels=[CHANNEL_WEBHOOKS_DUE],
            name="webhook-wake",
        )
        self._wake.start()

    @property
    def listening(self) -> bool:
        """True once the NOTIFY listener is in place (tests wait on it)."""
        return self._wake is not None and self._wake.listening.is_set()

    def close(self) -> None:
        self._stopping.set()
        if self._wake is not None:
            self._wake.join(self._settings.webhook_timeout_s * 2)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def deliver_due(self, now: datetime | None = None) -> DeliveryRound:
        """One round: every due delivery (up to a batch) POSTed once."""
        with self._round:
            return self._deliver_due(now)

    def _deliver_due(self, now: datetime | None) -> DeliveryRound:
        settings = self._settings
        lease_s = settings.webhook_timeout_s * (1 + WEBHOOK_BATCH / WEBHOOK_WORKERS) + 10
        with transaction(self._engine) as conn:
            due = store.take_due_webhooks(conn, WEBHOOK_BATCH, lease_s)
        if not due:
            return DeliveryRound()
        futures = [self._pool.submit(self._deliver, delivery, now) for delivery in due]
        wait(futures)  # all of them, even when one fails: the round ends when its POSTs do
        counts = {"delivered": 0, "failed": 0, "gave_up": 0}
        for future in futures:
            counts[future.result()] += 1  # a failure to record: raised, its lease retries it
        return DeliveryRound(**counts)

    def _deliver(self, delivery: DueWebhook, now: datetime | None) -> str:
        """POST one delivery and commit its outcome before this worker takes another."""
        result = self._post(delivery)
        with transaction(self._engine) as conn:
            outcome = self._record(conn, delivery, result, now or utcnow())
        metrics.WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
        return outcome

    def _post(self, delivery: DueWebhook) -> PostResult:
        started = time.perf_counter()
        result = post_signed(
            delivery.url,
            encode_body(delivery.payload),
            secret=self._secret,
            previous_secret=self._previous,
            delivery_id=delivery.id,
            timeout_s=self._settings.webhook_timeout_s,
            allowed=self._allowed,
        )
        metrics.WEBHOOK_POST_SECONDS.observe(time.perf_counter() - started)
        return result

    def _record(
        self, conn: Connection, delivery: DueWebhook, result: PostResult, now: datetime
    ) -> str:
        settings = self._settings
        where = fields(job=delivery.job_id, status=delivery.status, attempt=delivery.attempt)
        if result.delivered:
            store.record_webhook_delivered(conn, delivery.id, result.response_code or 200)
            log.info("webhook delivered", extra=where)
            return "delivered"
        retry_at: datetime | None = None
        if not result.permanent and delivery.attempt < settings.webhook_max_attempts:
            delay = backoff_delay_s(
                delivery.attempt,
                base_s=settings.webhook_backoff_base_s,
                max_s=settings.webhook_backoff_max_s,
            )
            retry_at = now + timedelta(seconds=delay)
        store.record_webhook_failed(
            conn,
            delivery.id,
            result.error or "failed",
            result.response_code,
            retry_at=retry_at,
        )
        if retry_at is None:
            log.warning("webhook given up: %s", result.error, extra=where)
            return "gave_up"
        log.info("webhook failed, will retry: %s", result.error, extra=where)
        return "failed"
