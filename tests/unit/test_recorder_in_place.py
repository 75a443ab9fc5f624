"""Completions written in the claiming thread (OutcomeRecorder.record_here): one statement when
every outcome is a plain completion; anything else, and any error, handed to the recorder's
thread, so that nothing is lost. The connection is a stand-in that records or refuses the
statement; the statement itself is tested against PostgreSQL in test_statement_connection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.elements import TextClause

from scrapefleet.common.db.statement_connection import StatementResult
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.recorder import OutcomeRecorder
from scrapefleet.consumer.runner import Outcome


class Statements:
    def __init__(self, *, down: bool = False) -> None:
        self.down = down
        self.completed: list[list[int]] = []

    def execute(self, statement: TextClause, parameters: Mapping[str, Any]) -> StatementResult:
        if self.down:
            raise DatabaseUnavailable("database unavailable: connection refused")
        self.completed.append(list(parameters["ids"]))

        class Moved:
            ids = list(parameters["ids"])

        return StatementResult([Moved()])


def recorder(statements: Statements) -> OutcomeRecorder:
    return OutcomeRecorder(
        sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"),  # never connected
        "h1",
        load_settings(None),
        statements=statements,
        after_write=lambda: None,
        give_up=lambda: False,
    )  # its thread is not started: what is handed over stays outstanding


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "noop", {}, 1, 3, None)


def test_plain_completions_are_written_in_place() -> None:
    statements = Statements()
    here = recorder(statements)
    done = [(job(1), Outcome.completed({"ok": True})), (job(2), Outcome.completed({}))]
    assert here.record_here(done) is True
    assert statements.completed == [[1, 2]] and here.outstanding == 0


def test_a_failure_among_them_goes_to_the_thread_whole() -> None:
    statements = Statements()
    here = recorder(statements)
    mixed = [(job(1), Outcome.completed({})), (job(2), Outcome.failed("ValueError: x"))]
    assert here.record_here(mixed) is False
    assert statements.completed == [] and here.outstanding == 2


def test_a_database_away_hands_them_to_the_thread_which_retries() -> None:
    statements = Statements(down=True)
    here = recorder(statements)
    assert here.record_here([(job(1), Outcome.completed({}))]) is False
    assert here.outstanding == 1
