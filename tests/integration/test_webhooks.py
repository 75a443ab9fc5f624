"""Webhooks: enqueued by the trigger, POSTed by the producer, signed, retried, deduped."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.api import Client
from scrapefleet.common.constants import WEBHOOK_PER_RECEIVER
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.jobs.webhook_signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from scrapefleet.producer.webhooks.webhook_sender import WebhookSender
from tests.integration.producer_helpers import producer_settings, submit
from tests.integration.webhook_receiver import Receiver
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SECRET = "webhook-test-secret-0123456789"


def hook_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "webhook_secret": SECRET,
        "webhook_backoff_base_s": 0.05,
        "webhook_backoff_max_s": 0.2,
        "webhook_interval_s": 0.05,
        # The receivers here listen on loopback, which the egress policy refuses by default.
        "webhook_allow_networks": ["127.0.0.0/8"],
    }
    return producer_settings(database_url, tmp_path, **(values | overrides))


def finish(engine: Engine, job_id: int, status: str) -> None:
    """What the consumer's writes do to the row (the trigger does not care who writes)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = :status, attempts = 1, finished_at = now(),"
                " result = CASE WHEN :status = 'completed' THEN '{\"title\": \"ok\"}'::jsonb END,"
                " last_error = CASE WHEN :status = 'failed' THEN 'Traceback...\nValueError: x' END"
                " WHERE id = :id"
            ),
            {"id": job_id, "status": status},
        )


def independent_check(received: Any) -> bool:
    """docs/how-to/webhooks.md's verification snippet, without scrapefleet's helpers."""
    timestamp = received.headers[TIMESTAMP_HEADER]
    expected = hmac.new(
        SECRET.encode(), timestamp.encode() + b"." + received.body, hashlib.sha256
    ).hexdigest()
    return hmac.compare_digest("sha256=" + expected, received.headers[SIGNATURE_HEADER])


def test_callback_url_must_be_http(database_url: str) -> None:
    for bad in ("file:///etc/passwd", "ftp://example.org/x", "javascript:alert(1)", "http://"):
        with pytest.raises(SubmitError, match="callback_url"):
            validate_job({"kind": "noop", "callback_url": bad})
    with Client(database_url) as client, pytest.raises(SubmitError, match="callback_url"):
        client.submit("noop", callback_url="gopher://127.0.0.1/")
    assert validate_job({"kind": "noop", "callback_url": "https://a.example/h"}).callback_url


def test_producer_delivers_signed_events(engine: Engine, database_url: str, tmp_path: Path) -> None:
    with Receiver() as receiver:
        ok, bad, silent = submit(
            engine,
            [
                NewJob("noop", callback_url=receiver.url),
                NewJob("noop", callback_url=receiver.url),
                NewJob("noop"),
            ],
        )
        finish(engine, ok, "completed")
        finish(engine, bad, "failed")
        finish(engine, silent, "completed")
        producer = Producer(hook_settings(database_url, tmp_path), engine)
        producer.start()
        try:
            wait_for(lambda: len(receiver.accepted()) == 2, 10, "two deliveries")
        finally:
            producer.stop()
    events = {}
    for received in receiver.accepted():
        assert received.headers["Content-Type"] == "application/json"
        assert verify(
            SECRET,
            received.body,
            received.headers[TIMESTAMP_HEADER],
            received.headers[SIGNATURE_HEADER],
        )
        assert independent_check(received)
        assert not verify(
            "another-secret-0123456789",
            received.body,
            received.headers[TIMESTAMP_HEADER],
            received.headers[SIGNATURE_HEADER],
        )
        body = json.loads(received.body)
        events[body["job_id"]] = body
    assert events[ok]["status"] == "completed" and events[ok]["result"] == {"title": "ok"}
    assert events[bad]["status"] == "failed" and events[bad]["error"].endswith("ValueError: x")
    assert events[ok]["finished_at"].endswith("Z")
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT job_id, delivered_at, response_code FROM webhook_deliveries")
        ).all()
    assert {r.job_id for r in rows} == {ok, bad}
    assert all(r.delivered_at is not None and r.response_code == 200 for r in rows)


def test_failing_receiver_gets_each_event_once_per_status(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = hook_settings(database_url, tmp_path, webhook_max_attempts=10)
    with Receiver(fail_first=5) as receiver:
        ids = submit(engine, [NewJob("noop", callback_url=receiver.url) for _ in range(3)])
        finish(engine, ids[0], "failed")
        finish(engine, ids[1], "completed")
        finish(engine, ids[2], "failed")
        # An operator retries the failed one and it completes: a second status, a second event.
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE jobs SET status = 'pending' WHERE id = :id"), {"id": ids[0]}
            )
        finish(engine, ids[0], "completed")
        sender = WebhookSender(engine, settings)
        try:

            def all_delivered() -> bool:
                sender.deliver_due()
                return len(receiver.accepted()) >= 4

            wait_for(all_delivered, 15, "every event delivered after the receiver recovered")
            for _ in range(5):  # later rounds send nothing more
                sender.deliver_due()
        finally:
            sender.close()
    refused = [r for r in receiver.received if r.answered != 200]
    assert len(refused) == 5
    accepted = [json.loads(r.body) for r in receiver.accepted()]
    pairs = sorted((e["job_id"], e["status"]) for e in accepted)
    assert pairs == sorted(
        [(ids[0], "failed"), (ids[0], "completed"), (ids[1], "completed"), (ids[2], "failed")]
    )


def test_delivery_is_given_up_after_max_attempts(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = hook_settings(database_url, tmp_path, webhook_max_attempts=3)
    with Receiver(fail_first=100, fail_code=503) as receiver:
        (job_id,) = submit(engine, [NewJob("noop", callback_url=receiver.url)])
        finish(engine, job_id, "completed")
        sender = WebhookSender(engine, settings)
        try:

            def given_up() -> bool:
                sender.deliver_due()
                with engine.connect() as conn:
                    return bool(
                        conn.execute(
                            sa.text("SELECT gave_up_at IS NOT NULL FROM webhook_deliveries")
                        ).scalar_one()
                    )

            wait_for(given_up, 10, "delivery given up")
        finally:
            sender.close()
    assert len(receiver.received) == 3
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM webhook_deliveries")).one()
    assert row.attempts == 3 and row.response_code == 503 and row.next_attempt_at is None
    assert row.delivered_at is None and "503" in row.last_error


def test_a_listening_sender_posts_at_once_and_only_while_leading(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """No interval round runs here (nothing calls deliver_due): each delivery is POSTed because
    its row's NOTIFY woke the sender."""
    settings = hook_settings(database_url, tmp_path, webhook_interval_s=3600)
    leading = False
    asked: list[bool] = []

    def is_leader() -> bool:
        asked.append(leading)
        return leading

    with Receiver() as receiver:
        ids = submit(engine, [NewJob("noop", callback_url=receiver.url) for _ in range(3)])
        sender = WebhookSender(engine, settings)
        try:
            sender.listen(is_leader)
            wait_for(lambda: sender.listening, 10, "the sender to LISTEN")
            finish(engine, ids[0], "completed")
            wait_for(lambda: len(asked) >= 1, 10, "the first wake-up")
            finish(engine, ids[1], "failed")
            # The listener runs one wake-up at a time: once it asks again, the first is over.
            wait_for(lambda: len(asked) >= 2, 10, "the second wake-up")
            with engine.connect() as conn:
                tried = conn.execute(sa.text("SELECT sum(attempts) FROM webhook_deliveries"))
                assert tried.scalar_one() == 0, "a standby sender POSTed"
            leading = True
            finish(engine, ids[2], "completed")
            wait_for(lambda: len(receiver.accepted()) == 3, 10, "every event, woken")
        finally:
            sender.close()
    delivered = sorted(json.loads(r.body)["job_id"] for r in receiver.accepted())
    assert delivered == sorted(ids)


def test_a_fast_receiver_is_never_behind_slow_ones(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """40 receivers that hold every POST, three deliveries each, then one delivery to a
    receiver that answers at once: it arrives while all the slow POSTs are still open."""
    release = threading.Event()
    settings = hook_settings(database_url, tmp_path, webhook_timeout_s=scaled(30))
    with contextlib.ExitStack() as stack:
        slow = [stack.enter_context(Receiver(hold=release)) for _ in range(40)]
        fast = stack.enter_context(Receiver())
        jobs = [NewJob("noop", callback_url=r.url) for r in slow for _ in range(3)]
        slow_ids = submit(engine, jobs)
        (fast_id,) = submit(engine, [NewJob("noop", callback_url=fast.url)])
        sender = WebhookSender(engine, settings)
        stack.callback(sender.close)
        stack.callback(release.set)  # first (last in, first out): the held POSTs end at once
        sender.listen(lambda: True)
        wait_for(lambda: sender.listening, 10, "the sender to LISTEN")
        for job_id in slow_ids:
            finish(engine, job_id, "completed")
        wait_for(lambda: sum(r.arrived for r in slow) >= 8, 20, "slow POSTs open")
        finish(engine, fast_id, "completed")
        started = time.monotonic()
        with contextlib.suppress(AssertionError):
            wait_for(lambda: fast.accepted(), 10, "the fast receiver's delivery")
        waited_s = time.monotonic() - started
        assert fast.accepted(), f"no delivery to the fast receiver after {waited_s:.1f} s"
        assert waited_s < scaled(2.0), f"the fast delivery waited {waited_s:.1f} s"
        # every slow receiver has a POST open, none more than the cap per receiver
        wait_for(lambda: all(r.arrived >= 1 for r in slow), 10, "every slow one busy")
        assert not release.is_set()
        assert max(r.arrived for r in slow) <= WEBHOOK_PER_RECEIVER
