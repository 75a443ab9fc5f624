"""Profiles: persistent browser identities (one account, one Chromium user-data-dir).

A browser job names one in its options (``"browser": {"profile": "acct-7"}``) or a pool of
them (``["acct-1", "acct-2"]``: any one will do). The producer picks a profile of the pool that
no job holds and that is not cooling down, sends the job to the host the profile is bound to
(the first host that ran it), and records the name on the job (``jobs.profile``); the consumer
runs it in a browser of its own on ``<profiles_dir>/<name>``, so the logins and cookies of one
profile's jobs carry over to its next job and to no other.

Pure and free of I/O: submit refuses a bad name here, with the field named, before anything is
inserted, and a name is safe as a directory name (no separator, no leading dot).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

PROFILE_KEY = "profile"  # inside the payload's ``browser`` options
# A directory name on every host: starts with a letter or digit, so never "." or "..".
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
PROFILE_NAME_SQL = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # the same, for the table's CHECK
MAX_POOL = 64  # profiles one job may name


class ProfileState(StrEnum):
    READY = "ready"
    COOLING = "cooling"  # until cooldown_until: a block, or an operator's `profiles cool`


def validate_profile_name(value: object) -> str:
    if not isinstance(value, str) or not PROFILE_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a profile name (1-64 letters, digits, '_', '.', '-';"
            " starting with a letter or digit)"
        )
    return value


def validate_profile_choice(value: object) -> str | list[str] | None:
    """A name, or a pool of distinct names (any one of them); None: no profile."""
    if value is None or isinstance(value, str):
        return None if value is None else validate_profile_name(value)
    if not isinstance(value, list) or not value:
        raise ValueError("must be a profile name or a non-empty list of them")
    if len(value) > MAX_POOL:
        raise ValueError(f"a pool holds at most {MAX_POOL} profiles")
    names = [validate_profile_name(v) for v in value]
    if len(set(names)) != len(names):
        raise ValueError("a profile is named twice in the pool")
    return names


def profile_pool(choice: str | list[str] | None) -> list[str] | None:
    """The names a job may run under, in the order given; None when it names none."""
    if choice is None:
        return None
    return [choice] if isinstance(choice, str) else list(choice)


def payload_profile_pool(payload: Mapping[str, Any]) -> list[str] | None:
    """The pool a (validated) payload names in its browser options, for the jobs row."""
    options = payload.get("browser")
    if not isinstance(options, Mapping):
        return None
    choice = options.get(PROFILE_KEY)
    return profile_pool(choice) if isinstance(choice, str | list) else None


def cooling(cooldown_until: datetime | None, now: datetime) -> bool:
    return cooldown_until is not None and cooldown_until > now
