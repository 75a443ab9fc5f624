"""The assignment's proxy steps around the pure rules (producer.assigning.proxy_rules): read the
pools' proxies before planning, lease the chosen ones after assigning, in the same transaction; and
a lease row for every job assigned under a proxy or a profile (the ban rates' denominators).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.store import PendingJob
from scrapefleet.producer.assigning.planner import Placement
from scrapefleet.producer.assigning.profile_rules import ProfilePlacement
from scrapefleet.producer.assigning.proxy_rules import ProxyPlacement


def proxy_placement(
    conn: Connection, pending: Sequence[PendingJob], now: datetime, inner: Placement | None
) -> Placement | None:
    """The rules for this plan over ``inner`` (the profiles'); ``inner`` itself (nothing read)
    when no candidate asks for a proxy pool."""
    pools = {job.proxy_pool for job in pending if job.proxy_pool is not None}
    if not pools:
        return inner
    wanted = {
        (job.proxy_pool, job.proxy_session)
        for job in pending
        if job.proxy_pool is not None and job.proxy_session is not None
    }
    sessions = store.session_rows(conn, wanted) if wanted else {}
    return ProxyPlacement(store.proxy_rows(conn, pools), now, inner, sessions)


def lease_assigned(
    conn: Connection, placement: Placement | None, assigned: Sequence[tuple[int, str]]
) -> None:
    """Each assigned job's chosen proxy on the job and counted, its chosen profile bound to its
    host, and a lease row for each job under either."""
    proxies = placement.chosen if isinstance(placement, ProxyPlacement) else {}
    profiles_placement = placement.inner if isinstance(placement, ProxyPlacement) else placement
    profiles = profiles_placement.chosen if isinstance(profiles_placement, ProfilePlacement) else {}
    if profiles:
        store.bind_profiles(
            conn,
            [(job_id, profiles[job_id], host) for job_id, host in assigned if job_id in profiles],
        )
    leases = [
        (job_id, proxies.get(job_id), profiles.get(job_id))
        for job_id, _ in assigned
        if job_id in proxies or job_id in profiles
    ]
    store.lease_identities(conn, leases)
