"""The browser stack supervisor's database writes: one store function per record, one
transaction each.

A database that is away costs the record (logged), never a second restart: the supervisor goes
on, and retries only the one write it cannot do without (the host back to ``active``).
"""

from __future__ import annotations

import logging
from typing import Protocol

from sqlalchemy.engine import Connection, Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.error_lines import first_line
from scrapefleet.consumer.browser.supervisor.events_and_actions import (
    Record,
    RecordHostEvent,
    RecordRebootRequest,
    RecordRestart,
    RecordStackFailure,
    RecordStackRetired,
    RecordStackStart,
    RecordStackSwitch,
    SetHostState,
)

log = logging.getLogger(__name__)


class StackRecords(Protocol):
    def write(self, record: Record) -> bool | None:
        """None: not written (the database is away). Else True, except a host state that did
        not move (the host was not in an expected state)."""


class StoreRecords:
    def __init__(self, engine: Engine, host: str) -> None:
        self.engine = engine
        self.host = host

    def write(self, record: Record) -> bool | None:
        try:
            with transaction(self.engine) as conn:
                return self._apply(conn, record)
        except Exception as exc:
            log.warning(
                "could not record %s for %s: %s", type(record).__name__, self.host, first_line(exc)
            )
            return None

    def _apply(self, conn: Connection, record: Record) -> bool:
        host = self.host
        match record:
            case SetHostState(to_state=to_state, reason=reason, expected=expected):
                return store.set_host_state(conn, host, to_state, reason, expected=list(expected))
            case RecordStackStart():
                store.begin_stack_lifetime(conn, host, record.jobs_in_flight, record.details)
            case RecordRestart() | RecordStackSwitch():
                store.reset_restart_counter(conn, host, record.details)
            case RecordStackRetired():
                store.record_host_event(conn, host, "stack_retired", details=record.details)
            case RecordStackFailure():
                store.record_stack_failure(conn, host, record.reason, record.details)
            case RecordRebootRequest(reason=reason):
                store.record_reboot_request(conn, host, reason)
            case RecordHostEvent(event=event, message=message):
                store.record_host_event(conn, host, event, message=message)
        return True
