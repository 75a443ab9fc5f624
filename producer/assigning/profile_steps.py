"""The assignment's profile step before the pure rules (producer.assigning.profile_rules): read the
pools' profiles before planning. The chosen ones are bound after assigning, in the same transaction,
with the proxies (producer.assigning.proxy_steps.lease_assigned).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.store import PendingJob
from scrapefleet.producer.assigning.profile_rules import ProfilePlacement


def profile_placement(
    conn: Connection, pending: Sequence[PendingJob], now: datetime
) -> ProfilePlacement | None:
    """The rules for this plan; None (nothing read) when no candidate names a profile, was
    blocked, or may still run on a host."""
    names = {name for job in pending for name in job.profiles}
    if not names and not any(job.blocked_on_host or job.lingering_on_host for job in pending):
        return None
    return ProfilePlacement(store.profile_rows(conn, names) if names else {}, now)
