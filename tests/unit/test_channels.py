"""Each host has its own assignment channel: a valid PostgreSQL identifier whatever its name."""

from __future__ import annotations

import pytest

from scrapefleet.common.db.channels import assigned_channel

pytestmark = pytest.mark.timeout(10)


def test_a_channel_per_host_within_an_identifiers_63_bytes() -> None:
    names = ["h1", "h2", "H1", "scraper-1.dc2.example.org", "x" * 255, "é" * 100]
    channels = [assigned_channel(n) for n in names]
    assert len(set(channels)) == len(names)
    assert all(len(c.encode()) <= 63 and c.isascii() and c == c.lower() for c in channels)
    assert assigned_channel("h1") == assigned_channel("h1")
