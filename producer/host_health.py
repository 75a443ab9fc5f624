"""Write one host's probe result, in a savepoint of its own.

The producer writes every host's health in one transaction. A host's report is bounded when
parsed (common.host_status), but a value the database still refuses (out of range, a check
constraint, a trigger) must not abort the others' writes with it: each host's write runs in a
savepoint, and when the database refuses it, that savepoint is rolled back and the host gets a
failed probe with the reason instead. A lost connection is not one host's fault: it propagates.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common import metrics, store
from scrapefleet.common.db import describe, is_connection_error
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.host_status import HostStatus
from scrapefleet.common.logging_setup import fields
from scrapefleet.common.store.statuses import HostState
from scrapefleet.producer.health import next_host_state

log = logging.getLogger(__name__)

Transition = tuple[str, str, str]  # host, from state, to state


def record_host_health(
    conn: Connection,
    name: str,
    state: str,
    result: HostStatus | ProbeError,
    threshold: int,
) -> Transition | None:
    """Store the probe's result for host ``name`` (now in ``state``) and move the host as
    producer.health decides; returns the move made, if any."""
    metrics.PROBES.labels(host=name).inc()
    if isinstance(result, HostStatus):
        try:
            with conn.begin_nested():
                return _apply(conn, name, state, result, threshold)
        except sa.exc.DBAPIError as exc:
            if is_connection_error(exc):
                raise
            result = ProbeError(f"status refused by the database: {describe(exc)}")
    with conn.begin_nested():
        return _apply(conn, name, state, result, threshold)


def _apply(
    conn: Connection, name: str, state: str, result: HostStatus | ProbeError, threshold: int
) -> Transition | None:
    if isinstance(result, HostStatus):
        store.record_probe_success(conn, name, result)
        failures, reported = 0, result.state
    else:
        metrics.PROBE_FAILURES.labels(host=name).inc()
        failures = store.record_probe_failure(conn, name, str(result))
        reported = None
        level = logging.INFO if failures == 1 else logging.DEBUG
        log.log(level, "probe failed host=%s failures=%d reason=%s", name, failures, result)
    new_state = next_host_state(state, failures == 0, failures, reported, threshold)
    if new_state == state:
        return None
    reason = (
        f"{failures} consecutive probe failures, last: {result}"
        if new_state == HostState.OFFLINE
        else "probe succeeds again"
    )
    if not store.set_host_state(conn, name, new_state, reason, expected=[state]):
        return None
    # A host lost is what an operator must see; one back is good news.
    log.log(
        logging.INFO if new_state == HostState.ACTIVE else logging.WARNING,
        "host %s %s -> %s: %s",
        name,
        state,
        new_state,
        reason,
        extra=fields(host=name, from_state=state, to_state=new_state),
    )
    return (name, state, new_state)
