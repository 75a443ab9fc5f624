"""How the admin CLI's commands fail: one line on stderr and an exit code that says what kind.

Exit 1 for a database that cannot be reached or a thing that does not exist; exit 2 for bad
input, bad settings or a refused change (nothing was changed).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from scrapefleet.common import masking
from scrapefleet.common.errors import DatabaseUnavailable, NotFound, ScrapefleetError


def exit_code(exc: ScrapefleetError) -> int:
    return 1 if isinstance(exc, DatabaseUnavailable | NotFound) else 2


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Every ScrapefleetError raised inside becomes ``error: ...`` on stderr and an exit."""
    try:
        yield
    except ScrapefleetError as exc:
        # An error may quote what a host or a page wrote: its control characters spelled out.
        click.echo(masking.terminal_text(f"error: {exc}"), err=True)
        sys.exit(exit_code(exc))
