"""A host's state after a probe: a pure decision, applied by the daemon through store.

Only the producer's own transitions live here (active <-> offline). Draining and disabled are
an operator's decision and restarting/rebooting the consumer's own; a probe never overrides
the first two. A host that stops answering while restarting or rebooting does go offline after
the same number of failures: a stack or a reboot that never comes back must not hold queued
jobs forever.
"""

from __future__ import annotations

from scrapefleet.common.store.statuses import HostState

OPERATOR_STATES = frozenset({HostState.DRAINING, HostState.DISABLED})


def next_host_state(
    current_state: str,
    probe_ok: bool,
    consecutive_failures: int,
    reported_state: str | None,
    threshold: int,
) -> str:
    """The state the host should be in now; equal to ``current_state`` when nothing changes.

    ``consecutive_failures`` counts the failed probes in a row including this one (0 after a
    success); ``reported_state`` is what the consumer's status document says (None when the
    probe failed).
    """
    if current_state in OPERATOR_STATES:
        return current_state
    if not probe_ok:
        if consecutive_failures >= threshold:
            return HostState.OFFLINE
        return current_state
    # Answering again. Back to active only once the consumer itself says it is active: one
    # still restarting stays offline (and gets no work) until its stack is up.
    if current_state == HostState.OFFLINE and reported_state == HostState.ACTIVE:
        return HostState.ACTIVE
    return current_state
