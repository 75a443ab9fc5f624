"""The assignment's two profile steps around the pure rules (producer.profile_rules): read the
pools' profiles before planning, bind the chosen ones after assigning, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.store import PendingJob
from scrapefleet.producer.profile_rules import ProfilePlacement


def profile_placement(
    conn: Connection, pending: Sequence[PendingJob], now: datetime
) -> ProfilePlacement | None:
    """The rules for this plan; None (nothing read) when no candidate names a profile, was
    blocked, or may still run on a host."""
    names = {name for job in pending for name in job.profiles}
    if not names and not any(job.blocked_on_host or job.lingering_on_host for job in pending):
        return None
    return ProfilePlacement(store.profile_rows(conn, names) if names else {}, now)


def bind_assigned_profiles(
    conn: Connection, placement: ProfilePlacement, assigned: Sequence[tuple[int, str]]
) -> None:
    """Each assigned job's chosen profile on the job, the profile bound to its host."""
    chosen = [
        (job_id, placement.chosen[job_id], host)
        for job_id, host in assigned
        if job_id in placement.chosen
    ]
    store.bind_profiles(conn, chosen)
