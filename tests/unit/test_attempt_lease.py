"""The consumer's lease on its attempts (consumer.attempt_lease): pure, no clock of its own."""

from __future__ import annotations

from scrapefleet.common.constants import SELF_FENCE_FRACTION
from scrapefleet.consumer.attempt_lease import AttemptLease


def test_the_lease_lapses_before_the_rescue_and_runs_from_when_a_beat_was_sent() -> None:
    lease = AttemptLease.for_rescue_after(60.0, now=100.0)
    assert lease.fence_after_s == 60.0 * SELF_FENCE_FRACTION < 60.0
    assert not lease.lapsed(100.0 + lease.fence_after_s)
    assert lease.lapsed(100.0 + lease.fence_after_s + 0.01)
    # A heartbeat sent at 130 that got through (answered later) renews from 130, not from when
    # its answer came: the database's heartbeat_at is no earlier than that.
    lease.renew(130.0)
    assert not lease.lapsed(130.0 + lease.fence_after_s)
    assert lease.silent_s(140.0) == 10.0
    # An older beat answering late never moves the lease back.
    lease.renew(120.0)
    assert lease.renewed_at == 130.0
