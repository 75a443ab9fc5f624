"""An error in one line: the first line of an exception (through SQLAlchemy's wrapper and
Selenium's message), the last line of a traceback."""

from __future__ import annotations

import psycopg
import sqlalchemy.exc
from selenium.common.exceptions import TimeoutException

from scrapefleet.common.error_lines import first_line, last_line


def test_an_exception_is_its_first_non_blank_line() -> None:
    exc = RuntimeError("\n  the grid is gone  \n  at frame 1\n  at frame 2\n")
    assert first_line(exc) == "the grid is gone"
    assert first_line(exc, named=True) == "RuntimeError: the grid is gone"


def test_an_exception_that_says_nothing_is_its_type() -> None:
    assert first_line(TimeoutError()) == "TimeoutError"
    assert first_line(TimeoutError("  \n"), named=True) == "TimeoutError"


def test_sqlalchemys_error_speaks_through_the_drivers_without_the_statement() -> None:
    driver = psycopg.OperationalError("connection refused\nIs the server running?")
    wrapped = sqlalchemy.exc.OperationalError("SELECT 1", {}, driver)
    assert "SELECT 1" in str(wrapped)
    assert first_line(wrapped) == "connection refused"
    assert first_line(wrapped, named=True) == "OperationalError: connection refused"


def test_seleniums_error_is_its_message_without_the_stack_trace() -> None:
    exc = TimeoutException("timeout: page load\n  (Session info: chrome=120)", stacktrace=["#0 x"])
    assert str(exc).startswith("Message: ")
    assert first_line(exc) == "timeout: page load"
    assert first_line(TimeoutException()) == "TimeoutException"


def test_text_is_its_first_line_and_nothing_is_empty() -> None:
    assert first_line("\n first \nsecond") == "first"
    assert first_line("") == first_line(None) == first_line("  \n ") == ""


def test_a_traceback_is_its_last_non_blank_line() -> None:
    traceback = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad url\n\n'
    assert last_line(traceback) == "ValueError: bad url"
    assert last_line(None) == last_line("") == last_line(" \n ") == ""
