"""The producer's webhook sender: POST due deliveries, signed, and record how each went.

Rows come from the ``jobs_webhook_enqueue`` trigger (a job with a callback_url that completes
or fails), and each new row NOTIFYs CHANNEL_WEBHOOKS_DUE. Deliveries are pulled continuously,
on the producer and never on a consumer: ``pump`` takes as many due rows as there are free
workers (their attempt counted and a lease set, one short transaction) and hands each to a
worker at once; it runs when that NOTIFY arrives (once ``listen`` is called), at every
``webhook_interval_s`` (retries coming due, NOTIFYs lost across a reconnect) and, while
listening, each time a worker ends a POST. No round waits for its slowest POST: a worker records
its outcome in its own short transaction (delivered, due again after a backoff, or given up
after ``webhook_max_attempts``) and its slot is taken again at once.

At most WEBHOOK_WORKERS POSTs are in flight, and at most WEBHOOK_PER_RECEIVER to one receiver
(its URL's host:port): the rows of a receiver at its cap are not taken (the statement skips
them, so its backlog holds no other receiver's row back), and a fast receiver is never behind a
slow one unless WEBHOOK_WORKERS / WEBHOOK_PER_RECEIVER receivers are all slow at once. A producer
that stops loses at most the POSTs in flight (their lease makes them due again). A receiver may
get an event twice (a response lost after it was handled) and dedupes on (job_id, status) or the
delivery id header; it never gets one it acknowledged again.

Each POST (producer/webhooks/webhook_http.py) goes only to addresses the egress policy allows
(producer/webhooks/webhook_egress.py) and ends by ``webhook_timeout_s`` whatever the receiver does.
A POST the policy refuses is given up at once: it would be refused the same way on every attempt,
since the allow-list is read once at start, and retrying it would only repeat the DNS lookup and the
log line ``webhook_max_attempts`` times. An operator who allows the address re-queues the row.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import masking, store, tracing_jobs
from scrapefleet.common.actions.retry import backoff_delay_s
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import (
    CHANNEL_WEBHOOKS_DUE,
    WEBHOOK_BATCH,
    WEBHOOK_BODIES_IN_FLIGHT_BYTES,
    WEBHOOK_PER_RECEIVER,
    WEBHOOK_SCAN_ROWS,
    WEBHOOK_WAKE_DEBOUNCE_S,
    WEBHOOK_WORKERS,
)
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.jobs.webhook_signing import DELIVERY_HEADER, sign
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import DueWebhook
from scrapefleet.producer.wakeup import WakeListener
from scrapefleet.producer.webhooks import webhook_egress as egress
from scrapefleet.producer.webhooks import webhook_http
from scrapefleet.producer.webhooks.webhook_http import PostResult

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
    """The exact bytes that are signed and sent (compact, keys sorted: stable for receivers).
    The job's error is a consumer's text: a cookie or a credential it quotes is masked, as
    everywhere else it is shown."""
    if isinstance(payload.get("error"), str):
        payload = {**payload, "error": masking.mask_text(str(payload["error"]))}
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
        # Threads are made as POSTs need them, up to the cap; pump never hands out more work
        # than there are free workers, so a delivery taken starts at once (its lease is short).
        self._pool = ThreadPoolExecutor(WEBHOOK_WORKERS, thread_name_prefix="webhook")
        self._taking = threading.Lock()  # one take at a time: the counts it reads stay true
        self._counts = threading.Lock()
        self._in_flight: Counter[str] = Counter()  # receiver -> POSTs running
        self._bytes_in_flight = 0  # their bodies' payload_bytes together
        self._continuous = False  # a worker that ends a POST pumps again (set by listen)
        self._is_leader: Callable[[], bool] = lambda: True
        self._stopping = threading.Event()
        self._wake: WakeListener | None = None

    def listen(self, is_leader: Callable[[], bool]) -> None:
        """Also run a round as soon as a delivery is enqueued (its NOTIFY), while ``is_leader()``
        says this producer is the one that sends."""

        def woken() -> None:
            if is_leader() and not self._stopping.is_set():
                self._pump_logged()

        if self._wake is not None:
            return
        self._is_leader = is_leader
        self._continuous = True
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

    def pump(self, now: datetime | None = None) -> list[Future[str]]:
        """Take what is due and has room (free workers, receivers under their cap), start a
        worker on each, and return at once: the workers record their own outcomes."""
        started: list[Future[str]] = []
        lease_s = self._settings.webhook_timeout_s + 10
        with self._taking:
            while not self._stopping.is_set():
                with self._counts:
                    in_flight = dict(self._in_flight)
                    bytes_left = WEBHOOK_BODIES_IN_FLIGHT_BYTES - self._bytes_in_flight
                free = WEBHOOK_WORKERS - sum(in_flight.values())
                if free <= 0 or (bytes_left <= 0 and in_flight):
                    break
                asked = min(free, WEBHOOK_BATCH)
                with transaction(self._engine) as conn:
                    due = store.take_due_webhooks(
                        conn,
                        asked,
                        lease_s,
                        in_flight=in_flight,
                        per_receiver=WEBHOOK_PER_RECEIVER,
                        scan=WEBHOOK_SCAN_ROWS,
                        bytes_left=bytes_left,
                    )
                with self._counts:
                    self._in_flight.update(d.receiver for d in due)
                    self._bytes_in_flight += sum(d.payload_bytes for d in due)
                started += [self._pool.submit(self._deliver, d, now) for d in due]
                if len(due) < asked:
                    break  # nothing more is due that has room (a receiver's, or the bytes')
        return started

    def deliver_due(self, now: datetime | None = None) -> DeliveryRound:
        """Pump once and wait for the deliveries it started (a script's or a test's "send
        what is due now"; the producer pumps and never waits)."""
        futures = self.pump(now)
        wait(futures)
        counts = {"delivered": 0, "failed": 0, "gave_up": 0}
        for future in futures:
            counts[future.result()] += 1  # a failure to record: raised, its lease retries it
        return DeliveryRound(**counts)

    def _pump_logged(self) -> None:
        try:
            self.pump()
        except Exception as exc:  # the next NOTIFY, POST's end or interval tries again
            log.warning("taking due webhooks failed, retrying next time: %s", first_line(exc))

    @tracing_jobs.delivery_traced
    def _deliver(self, delivery: DueWebhook, now: datetime | None) -> str:
        """POST one delivery and commit its outcome; then, while listening, take more."""
        try:
            result = self._post(delivery)
            with transaction(self._engine) as conn:
                outcome = self._record(conn, delivery, result, now or utcnow())
        finally:
            with self._counts:
                self._bytes_in_flight -= delivery.payload_bytes
                self._in_flight[delivery.receiver] -= 1
                if self._in_flight[delivery.receiver] <= 0:
                    del self._in_flight[delivery.receiver]
        metrics.WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
        if self._continuous and self._is_leader() and not self._stopping.is_set():
            self._pump_logged()
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
