"""The producer never holds more webhook bodies than its budget: deliveries of large results are
taken only while their sizes (``webhook_deliveries.payload_bytes``) fit what the budget has
left after the POSTs in flight, and one body larger than the whole budget still goes, alone.
Real PostgreSQL, real receivers on 127.0.0.1 that hold their answers."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.store import NewJob
from scrapefleet.producer.webhooks import webhook_sender
from scrapefleet.producer.webhooks.webhook_sender import WebhookSender
from tests.integration.producer_helpers import submit
from tests.integration.test_webhooks import hook_settings
from tests.integration.webhook_receiver import Receiver
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MB = 1024 * 1024


def _finish_with_result(engine: Engine, job_ids: list[int], result_bytes: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'completed', attempts = 1, finished_at = now(),"
                " result = jsonb_build_object('text', repeat('x', :n)) WHERE id = ANY(:ids)"
            ),
            {"ids": job_ids, "n": result_bytes},
        )


def _sizes(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT payload_bytes FROM webhook_deliveries ORDER BY id"))
        return [r.payload_bytes for r in rows]


def test_due_rows_are_taken_while_their_bodies_fit(engine: Engine) -> None:
    ids = submit(engine, [NewJob("noop", callback_url=f"http://r{i}.test/h") for i in range(3)])
    _finish_with_result(engine, ids, 3 * MB)
    sizes = _sizes(engine)
    assert len(sizes) == 3 and all(3 * MB < size < 3 * MB + 1000 for size in sizes), sizes

    with engine.begin() as conn:  # two fit in 7 MB, not three
        taken = store.take_due_webhooks(conn, 10, 60, bytes_left=7 * MB)
    assert [d.job_id for d in taken] == ids[:2]
    assert [d.payload_bytes for d in taken] == sizes[:2]
    with engine.begin() as conn:  # others in flight: nothing that does not fit
        assert store.take_due_webhooks(conn, 10, 60, in_flight={"x.test": 1}, bytes_left=MB) == []
    with engine.begin() as conn:  # nothing in flight: the first goes, however large
        (alone,) = store.take_due_webhooks(conn, 10, 60, bytes_left=MB)
    assert alone.job_id == ids[2]


def test_the_sender_holds_no_more_bodies_than_its_budget(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_sender, "WEBHOOK_BODIES_IN_FLIGHT_BYTES", 7 * MB)
    hold = threading.Event()
    with ExitStack() as stack:
        # Six receivers: the per-receiver cap alone would let all six POSTs start at once.
        receivers = [stack.enter_context(Receiver(hold=hold)) for _ in range(6)]
        ids = submit(engine, [NewJob("noop", callback_url=r.url) for r in receivers])
        _finish_with_result(engine, ids, 3 * MB)
        sender = WebhookSender(engine, hook_settings(database_url, tmp_path))
        stack.callback(sender.close)
        stack.callback(hold.set)

        started = sender.pump()
        assert len(started) == 2  # 6 MB in flight; a third would pass 7 MB
        wait_for(lambda: sum(r.arrived for r in receivers) == 2, what="two POSTs to arrive")
        assert sender.pump() == []  # full: nothing more while they are held

        hold.set()
        delivered = 2
        for future in started:
            assert future.result(scaled(20)) == "delivered"
        while delivered < len(ids):  # the rest, two at a time as bodies leave
            batch = sender.pump()
            assert 1 <= len(batch) <= 2, len(batch)
            delivered += sum(f.result(scaled(20)) == "delivered" for f in batch)
    assert sum(len(r.received) for r in receivers) == len(ids)
