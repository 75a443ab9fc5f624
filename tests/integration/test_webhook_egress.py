"""Webhook hardening against real HTTP servers on 127.0.0.1: the egress policy, the pinned
address, one deadline per POST whatever the receiver does, the delivery id, secret rotation."""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.jobs.webhook_signing import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify,
)
from scrapefleet.common.store import NewJob
from scrapefleet.producer.webhooks import webhook_http
from scrapefleet.producer.webhooks.webhook_egress import IPAddress, parse_networks
from scrapefleet.producer.webhooks.webhook_sender import DeliveryRound, WebhookSender
from tests.integration.producer_helpers import submit
from tests.integration.test_webhooks import finish, hook_settings
from tests.integration.webhook_receiver import Receiver
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

LOOPBACK = parse_networks(["127.0.0.0/8"])
REFUSED = "refused: 127.0.0.1 is loopback; add it to webhook_allow_networks to allow"


def rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT * FROM webhook_deliveries ORDER BY id")))


def one_round(engine: Engine, database_url: str, tmp_path: Path, **overrides: Any) -> DeliveryRound:
    sender = WebhookSender(engine, hook_settings(database_url, tmp_path, **overrides))
    try:
        return sender.deliver_due()
    finally:
        sender.close()


class Trickler:
    """A receiver on 127.0.0.1 that reads the whole request, sends ``at_once`` bytes of its
    answer, then the rest one byte a second: a slow-loris receiver."""

    def __init__(self, answer: bytes, at_once: int = 0) -> None:
        self.answer = answer
        self.at_once = at_once
        self.requests: list[bytes] = []
        self.dropped = threading.Event()  # the sender closed the connection on us
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hook"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:  # closed before anyone connected
            return
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(request)
            try:
                conn.sendall(self.answer[: self.at_once])
                for i in range(self.at_once, len(self.answer)):
                    if self._stop.wait(1.0):  # the pace of the trickle, and our way out
                        return
                    conn.sendall(self.answer[i : i + 1])
            except OSError:
                self.dropped.set()

    def __enter__(self) -> Trickler:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(5)


# -- the egress policy ------------------------------------------------------------------------


def test_loopback_is_refused_unless_allowed(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with Receiver() as receiver:
        by_name = receiver.url.replace("127.0.0.1", "localhost")
        first, named = submit(
            engine,
            [NewJob("noop", callback_url=receiver.url), NewJob("noop", callback_url=by_name)],
        )
        finish(engine, first, "completed")
        finish(engine, named, "completed")
        assert one_round(engine, database_url, tmp_path, webhook_allow_networks=[]) == (
            DeliveryRound(gave_up=2)
        )
        assert receiver.received == []
        refused = {row.job_id: row for row in rows(engine)}
        row = refused[first]
        # Given up at once: every later attempt would be refused the same way.
        assert row.last_error == REFUSED
        assert row.attempts == 1 and row.gave_up_at is not None and row.next_attempt_at is None
        assert row.response_code is None and row.delivered_at is None
        # A name is judged by what it resolves to (127.0.0.1 or ::1, both loopback).
        assert refused[named].last_error.startswith("refused: localhost resolves to ")
        assert "which is loopback; add it to webhook_allow_networks" in refused[named].last_error

        # Allowed, and re-queued the way docs/how-to/webhooks.md says: delivered.
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE webhook_deliveries SET next_attempt_at = now(), gave_up_at = NULL"
                    " WHERE id = :id"
                ),
                {"id": row.id},
            )
        allowed = one_round(engine, database_url, tmp_path, webhook_allow_networks=["127.0.0.0/8"])
        assert allowed == DeliveryRound(delivered=1)
        assert len(receiver.accepted()) == 1
    delivered = {r.job_id: r for r in rows(engine)}[first]
    assert delivered.delivered_at is not None and delivered.last_error is None


def test_the_checked_address_is_the_one_connected_to() -> None:
    """One lookup, checked, then connected to with the URL's own name in Host: a second,
    different DNS answer (rebinding) is never asked for."""
    lookups: list[str] = []

    def rebinding(host: str, port: int) -> Sequence[IPAddress]:
        lookups.append(host)
        # The first answer is the one checked; any later one would point elsewhere.
        address = "127.0.0.1" if len(lookups) == 1 else "127.0.0.2"
        return [ipaddress.ip_address(address)]

    with Receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        url = f"http://hooks.example.test:{port}/hook"
        result = webhook_http.post(
            url, b"{}", {}, timeout_s=scaled(5.0), allowed=LOOPBACK, resolve=rebinding
        )
        assert result.delivered and result.response_code == 200
        assert lookups == ["hooks.example.test"]
        (received,) = receiver.received
        assert received.headers["Host"] == f"hooks.example.test:{port}"

        lookups.clear()
        refused = webhook_http.post(
            url, b"{}", {}, timeout_s=scaled(5.0), allowed=(), resolve=rebinding
        )
        assert refused.permanent and not refused.delivered
        assert refused.error == (
            "refused: hooks.example.test resolves to 127.0.0.1, which is loopback;"
            " add it to webhook_allow_networks to allow"
        )
        assert lookups == ["hooks.example.test"] and len(receiver.received) == 1


def self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` and its key (cryptography comes with paramiko)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_tls_uses_the_url_name_for_sni_and_the_certificate(tmp_path: Path) -> None:
    cert_file, key_file = self_signed(tmp_path, "hooks.example.test")
    names: list[str | None] = []
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)

    def record_name(sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        names.append(name)

    server_context.sni_callback = record_name
    trusting = ssl.create_default_context(cafile=str(cert_file))

    def to_loopback(host: str, port: int) -> Sequence[IPAddress]:
        return [ipaddress.ip_address("127.0.0.1")]

    with Receiver(tls=server_context) as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        post = functools.partial(
            webhook_http.post,
            timeout_s=scaled(5.0),
            allowed=LOOPBACK,
            resolve=to_loopback,
            ssl_context=trusting,
        )
        good = post(f"https://hooks.example.test:{port}/hook", b"{}", {})
        assert good.delivered, good.error
        assert names == ["hooks.example.test"]
        # A name the certificate does not cover fails, although the address is the same.
        wrong = post(f"https://other.example.test:{port}/hook", b"{}", {})
        assert not wrong.delivered and not wrong.permanent
        assert "certificate" in (wrong.error or "").lower()
    assert len(receiver.accepted()) == 1


# -- one deadline per POST --------------------------------------------------------------------


def test_a_receiver_trickling_its_headers_is_abandoned_at_the_deadline(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    deadline_s = 1.5
    with Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") as receiver:
        (job,) = submit(engine, [NewJob("noop", callback_url=receiver.url)])
        finish(engine, job, "completed")
        started = time.monotonic()
        outcome = one_round(engine, database_url, tmp_path, webhook_timeout_s=deadline_s)
        elapsed = time.monotonic() - started
        wait_for(receiver.dropped.is_set, 5, "the sender to hang up on the trickle")
    assert outcome == DeliveryRound(failed=1)
    assert elapsed < deadline_s + scaled(1.0), f"the POST took {elapsed:.1f} s"
    (row,) = rows(engine)
    assert row.last_error == f"timed out: no answer within {deadline_s} s"
    assert row.response_code is None and row.next_attempt_at is not None  # retried later


def test_a_trickled_body_is_never_read_nor_kept(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    hostile = b"<script>alert(document.cookie)</script>" * 20
    head = (
        b"HTTP/1.1 503 <img src=x onerror=alert(1)>\r\n"
        + f"Content-Length: {len(hostile)}\r\n\r\n".encode()
    )
    deadline_s = 3.0
    with Trickler(head + hostile, at_once=len(head)) as receiver:
        (job,) = submit(engine, [NewJob("noop", callback_url=receiver.url)])
        finish(engine, job, "completed")
        started = time.monotonic()
        outcome = one_round(engine, database_url, tmp_path, webhook_timeout_s=deadline_s)
        elapsed = time.monotonic() - started
    assert outcome == DeliveryRound(failed=1)
    assert elapsed < deadline_s, f"the POST waited on the body: {elapsed:.1f} s"
    (row,) = rows(engine)
    # Our own words for the status, never the receiver's reason phrase or body.
    assert row.response_code == 503 and row.last_error == "HTTP 503 Service Unavailable"


def test_each_outcome_is_committed_while_other_posts_are_in_flight(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    deadline_s = scaled(4.0)
    with Trickler(b"HTTP/1.1 200 OK\r\n\r\n") as slow, Receiver() as fast:
        slow_job, fast_job = submit(
            engine,
            [NewJob("noop", callback_url=slow.url), NewJob("noop", callback_url=fast.url)],
        )
        finish(engine, slow_job, "completed")
        finish(engine, fast_job, "completed")
        sender = WebhookSender(
            engine, hook_settings(database_url, tmp_path, webhook_timeout_s=deadline_s)
        )
        rounds: list[DeliveryRound] = []
        running = threading.Thread(target=lambda: rounds.append(sender.deliver_due()))
        try:
            running.start()

            def fast_committed() -> bool:
                return any(r.job_id == fast_job and r.delivered_at for r in rows(engine))

            wait_for(fast_committed, deadline_s, "the fast delivery's outcome")
            assert running.is_alive(), "the round ended first: nothing shows the early commit"
            running.join(deadline_s + scaled(5.0))
        finally:
            sender.close()
    assert rounds == [DeliveryRound(delivered=1, failed=1)]


# -- headers: the delivery id, signatures under rotation ---------------------------------------


def test_the_delivery_id_is_sent_and_kept_across_retries(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with Receiver(fail_first=1) as receiver:
        (job,) = submit(engine, [NewJob("noop", callback_url=receiver.url)])
        finish(engine, job, "completed")
        sender = WebhookSender(engine, hook_settings(database_url, tmp_path))
        try:

            def delivered() -> bool:
                sender.deliver_due()
                return bool(receiver.accepted())

            wait_for(delivered, 10, "the retried delivery")
        finally:
            sender.close()
    (row,) = rows(engine)
    assert [r.headers[DELIVERY_HEADER] for r in receiver.received] == [str(row.id)] * 2


NEW = "the-new-webhook-secret-0123"
OLD = "the-old-webhook-secret-4567"


def test_both_signatures_verify_during_rotation(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with Receiver() as receiver:
        (job,) = submit(engine, [NewJob("noop", callback_url=receiver.url)])
        finish(engine, job, "completed")
        rotating = {"webhook_secret": NEW, "webhook_secret_previous": OLD}
        assert one_round(engine, database_url, tmp_path, **rotating) == DeliveryRound(delivered=1)
    (received,) = receiver.received
    timestamp = received.headers[TIMESTAMP_HEADER]
    header = received.headers[SIGNATURE_HEADER]
    for secret in (NEW, OLD):
        assert verify(secret, received.body, timestamp, header)
    assert not verify("some-other-secret-0123456", received.body, timestamp, header)

    # The webhooks page's receiver, written out: one entry per secret, the current one first.
    def entry(secret: str) -> str:
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + received.body, hashlib.sha256)
        return "sha256=" + mac.hexdigest()

    assert header.split(",") == [entry(NEW), entry(OLD)]
