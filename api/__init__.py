"""scrapefleet: a producer/consumer scheduler for fleets of scraping hosts. This package is its
public Python API, for a scraper's author and a submitting program:

    from scrapefleet import Blocked, Client, Permanent, Spawned, register, submit

The names are scrapefleet.common.api's (documented there and in docs/scrapers.md), loaded when
one is first used: importing the package alone (as the CLI and the daemons do, for their own
modules under it) loads neither the database driver nor pydantic. Names outside ``__all__``
(and the other modules of scrapefleet) may change between versions.

The source folder is ``api/`` (pyproject.toml's package-dir): the repository keeps its
top-level folders, installed under this one package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ loads them
    from scrapefleet.common.api import (
        FINISHED,
        Blocked,
        Child,
        Client,
        FreeParams,
        InsertResult,
        Isolation,
        JobFailed,
        Lightness,
        NewJob,
        Permanent,
        RateLimited,
        ResultFilter,
        ScrapefleetError,
        SettingsError,
        Spawned,
        SubmitError,
        UnknownAction,
        register,
        submit,
        validate_job,
    )

__all__ = [
    "FINISHED",
    "Blocked",
    "Child",
    "Client",
    "FreeParams",
    "InsertResult",
    "Isolation",
    "JobFailed",
    "Lightness",
    "NewJob",
    "Permanent",
    "RateLimited",
    "ResultFilter",
    "ScrapefleetError",
    "SettingsError",
    "Spawned",
    "SubmitError",
    "UnknownAction",
    "register",
    "submit",
    "validate_job",
]

_API = "scrapefleet.common.api"


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'scrapefleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API), name)
    globals()[name] = value  # once: the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
