"""Webhook signatures: HMAC-SHA256 over ``timestamp + "." + body`` with the shared secret.

The producer signs with ``sign``; a receiver written in Python can use ``verify`` as it is (it
needs nothing else from scrapefleet). Headers:

    X-Scrapefleet-Timestamp: 1763798400            (Unix seconds when the POST was made)
    X-Scrapefleet-Signature: sha256=<hex digest>
    X-Scrapefleet-Delivery: 8812                   (the same on every retry of one event)

The timestamp is inside the signed text, so a captured request cannot be replayed later with a
fresh timestamp; ``verify`` refuses one older than ``tolerance_s``.

Rotating the secret (Stripe's convention, which sends one ``v1=`` entry per active secret):
while ``webhook_secret_previous`` is set, the signature header carries one entry per secret,
the current one first, separated by commas: ``sha256=<hex, new secret>,sha256=<hex, old
secret>``. A receiver accepts the request when any entry matches a secret it holds, so it can
switch from the old secret to the new one at its own pace; ``verify`` does this.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

TIMESTAMP_HEADER = "X-Scrapefleet-Timestamp"
SIGNATURE_HEADER = "X-Scrapefleet-Signature"
DELIVERY_HEADER = "X-Scrapefleet-Delivery"
SIGNATURE_PREFIX = "sha256="
MAX_SIGNATURES = 8  # entries of one header looked at: a receiver's work stays bounded
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The header value: ``sha256=`` + hex HMAC-SHA256(secret, timestamp + "." + body)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def sign(
    secret: str, body: bytes, now: float | None = None, *, previous: str | None = None
) -> dict[str, str]:
    """The two headers for a POST of ``body`` made at ``now`` (Unix seconds): signed with
    ``secret``, and also with ``previous`` while a rotation is under way."""
    timestamp = str(int(time.time() if now is None else now))
    entries = [signature(key, timestamp, body) for key in (secret, previous) if key]
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: ",".join(entries)}


def signatures(signature_header: str) -> list[str]:
    """The ``sha256=`` entries of a signature header, in order."""
    entries = (entry.strip() for entry in signature_header.split(","))
    return [e for e in entries if e.startswith(SIGNATURE_PREFIX)][:MAX_SIGNATURES]


def verify(
    secret: str | Sequence[str],
    body: bytes,
    timestamp: str | None,
    signature_header: str | None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """True when the timestamp is recent and an entry of the signature header matches the raw
    body under ``secret`` (or under any of several, while the receiver holds two)."""
    if not timestamp or not signature_header or not timestamp.isdigit():
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance_s:
        return False
    secrets = [secret] if isinstance(secret, str) else list(secret)
    entries = signatures(signature_header)
    # Every pair is compared, so the time taken does not tell which entry matched.
    matches = [
        hmac.compare_digest(signature(key, timestamp, body), entry)
        for key in secrets
        for entry in entries
    ]
    return any(matches)
