"""The LISTEN/NOTIFY channel a host's consumer is woken on: one per host.

On one shared channel every consumer received, and looked at, every other host's assignment:
work for each consumer and for PostgreSQL (which delivers each NOTIFY to every listening
session) that grows with the square of the fleet. A channel name is an identifier of at most 63
bytes and a host name may be longer, so the channel carries a digest of it; the payload is the
host's name.
"""

from __future__ import annotations

import hashlib

from scrapefleet.common.constants import CHANNEL_ASSIGNED

DIGEST_CHARS = 24  # 96 bits: no two hosts of a fleet share a channel


def assigned_channel(host: str) -> str:
    """The channel the producer (and a pinned submit) NOTIFYs when ``host`` got work."""
    digest = hashlib.sha256(host.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{CHANNEL_ASSIGNED}_{digest}"
