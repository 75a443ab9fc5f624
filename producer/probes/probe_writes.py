"""Write the hosts' probe results: the reports in one statement, anything else host by host.

The producer writes every host's health in one transaction. A host's report is bounded when
parsed (common.status.document), but a value the database still refuses (out of range, a check
constraint, a trigger) must not abort the others' writes with it. So the reports go first in one
statement inside a savepoint (a round trip per host would be most of a cycle at a thousand
hosts); if the database refuses that, it is rolled back and each host's write runs in a
savepoint of its own, where a refused report rolls back alone and the host gets a failed probe
with the reason instead. A lost connection is not one host's fault: it propagates. Every write
skips a host row another session holds (its consumer may hold it as long as it likes): that
host waits for the next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from scrapefleet.common import store
from scrapefleet.common.db.engines import is_connection_error
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import ProbeError
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.status.document import HostStatus
from scrapefleet.common.store.statuses import HostState
from scrapefleet.producer.probes.host_state_rule import next_host_state

log = logging.getLogger(__name__)

Transition = tuple[str, str, str]  # host, from state, to state


def record_fleet_health(
    conn: Connection,
    hosts: Sequence[tuple[str, str]],
    results: Mapping[str, HostStatus | ProbeError],
    threshold: int,
) -> tuple[Transition, ...]:
    """record_host_health for every (name, state) in ``hosts`` that has a result; the reports
    batched. Returns the moves made, in the order of ``hosts``."""
    reports = {
        name: result
        for name, _state in hosts
        if isinstance(result := results.get(name), HostStatus)
    }
    stored = _store_reports(conn, reports)
    moves = []
    for name, state in hosts:
        result = results.get(name)
        if result is None:
            continue
        if stored is not None and isinstance(result, HostStatus):
            if name not in stored:
                continue  # no row (removed since the cycle read the hosts), or held by its
                # consumer's session: this host waits for the next cycle, the others go on
            metrics.PROBES.labels(host=name).inc()
            # Our own state values only: nothing a host sent, so no savepoint of its own.
            moved = _move(conn, name, state, 0, result, threshold)
        else:
            moved = record_host_health(conn, name, state, result, threshold)
        if moved is not None:
            moves.append(moved)
    return tuple(moves)


def _store_reports(conn: Connection, reports: Mapping[str, HostStatus]) -> set[str] | None:
    """The reports in one statement: the names stored, or None if the database refused one
    (then nothing is stored)."""
    if not reports:
        return set()
    try:
        with conn.begin_nested():
            return set(store.record_probe_successes(conn, reports))
    except sa.exc.DBAPIError as exc:
        if is_connection_error(exc):
            raise
        log.info("batched host reports refused (%s): writing host by host", first_line(exc))
        return None


def record_host_health(
    conn: Connection,
    name: str,
    state: str,
    result: HostStatus | ProbeError,
    threshold: int,
) -> Transition | None:
    """Store the probe's result for host ``name`` (now in ``state``) and move the host as
    producer.probes.host_state_rule decides; returns the move made, if any."""
    metrics.PROBES.labels(host=name).inc()
    if isinstance(result, HostStatus):
        try:
            with conn.begin_nested():
                return _apply(conn, name, state, result, threshold)
        except sa.exc.DBAPIError as exc:
            if is_connection_error(exc):
                raise
            result = ProbeError(f"status refused by the database: {first_line(exc)}")
    with conn.begin_nested():
        return _apply(conn, name, state, result, threshold)


def _apply(
    conn: Connection, name: str, state: str, result: HostStatus | ProbeError, threshold: int
) -> Transition | None:
    if isinstance(result, HostStatus):
        if not store.record_probe_success(conn, name, result):
            return None  # gone, or held by its consumer: no move this cycle
        failures = 0
    else:
        metrics.PROBE_FAILURES.labels(host=name).inc()
        counted = store.record_probe_failure(conn, name, str(result))
        if counted is None:
            return None
        failures = counted
        level = logging.INFO if failures == 1 else logging.DEBUG
        log.log(level, "probe failed host=%s failures=%d reason=%s", name, failures, result)
    return _move(conn, name, state, failures, result, threshold)


def _move(
    conn: Connection,
    name: str,
    state: str,
    failures: int,
    result: HostStatus | ProbeError,
    threshold: int,
) -> Transition | None:
    """The host's state as producer.probes.host_state_rule decides, after its result was stored."""
    reported = result.state if isinstance(result, HostStatus) else None
    new_state = next_host_state(state, failures == 0, failures, reported, threshold)
    if new_state == state:
        return None
    reason = (
        f"{failures} consecutive probe failures, last: {result}"
        if new_state == HostState.OFFLINE
        else "probe succeeds again"
    )
    if not store.set_host_state(conn, name, new_state, reason, expected=[state], skip_locked=True):
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
