"""Webhook signatures: HMAC-SHA256 over ``timestamp + "." + body`` with the shared secret.

The producer signs with ``sign``; a receiver written in Python can use ``verify`` as it is (it
needs nothing else from scrapefleet). Headers:

    X-Scrapefleet-Timestamp: 1763798400            (Unix seconds when the POST was made)
    X-Scrapefleet-Signature: sha256=<hex digest>

The timestamp is inside the signed text, so a captured request cannot be replayed later with a
fresh timestamp; ``verify`` refuses one older than ``tolerance_s``.
"""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-Scrapefleet-Timestamp"
SIGNATURE_HEADER = "X-Scrapefleet-Signature"
SIGNATURE_PREFIX = "sha256="
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The header value: ``sha256=`` + hex HMAC-SHA256(secret, timestamp + "." + body)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def sign(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The two headers for a POST of ``body`` made at ``now`` (Unix seconds)."""
    timestamp = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    body: bytes,
    timestamp: str | None,
    signature_header: str | None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """True when the signature matches the raw body and the timestamp is recent."""
    if not timestamp or not signature_header or not timestamp.isdigit():
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), signature_header)
