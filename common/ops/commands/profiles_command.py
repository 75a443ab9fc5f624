"""`scrapefleet profiles`: the operator's commands on persistent browser profiles.

    scrapefleet profiles list                    every profile: host, state, cool-down, use
    scrapefleet profiles reset NAME              end its cool-down, forget its blocks
    scrapefleet profiles move NAME --to HOST     bind it to HOST (copy its directory there first)
    scrapefleet profiles cool NAME --for 2h      no job for it for that long

A command that changed nothing says why on one line and exits non-zero: 1 for a profile or
host that does not exist, 2 for bad input or a refused change (a duration that is not one, a
move while a job of the profile runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.one_line_errors import one_line_errors

_PART = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_COOL_S = 365 * 86400


def parse_duration(text: str, option: str = "--for") -> float:
    """ "2h", "90m", "1h30m", "45s", "7d" -> seconds; SubmitError naming ``option`` otherwise."""
    value = text.strip().lower()
    parts = _PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise SubmitError(f"{option} {text!r}: not a duration: give e.g. 30m, 2h, 1h30m or 7d")
    seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
    if not 0 < seconds <= MAX_COOL_S:
        raise SubmitError(f"{option} {text!r}: must be more than 0 s and at most 365d")
    return float(seconds)


def state_now(row: dict[str, Any], now: datetime) -> str:
    """What the row's state means now: a cool-down that has passed is over, whatever the
    stored state says until the profile's next job."""
    until = row["cooldown_until"]
    if until is not None and until > now:
        return f"cooling {_left(until - now)}"
    return "ready"


def _left(delta: Any) -> str:
    minutes = max(1, int(delta.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def profile_lines(rows: list[dict[str, Any]], now: datetime) -> Iterator[str]:
    yield f"{'name':<24} {'host':<16} {'state':<16} {'jobs':>6} {'blocks':>6}  last used"
    for row in rows:
        used = row["last_used_at"]
        yield (
            f"{row['name']:<24} {(row['host'] or '-'):<16} {state_now(row, now):<16}"
            f" {row['jobs']:>6} {row['blocks']:>6}  {f'{used:%Y-%m-%d %H:%M:%S}' if used else '-'}"
        )


@contextmanager
def _transaction(obj: Any) -> Iterator[Any]:
    from scrapefleet.common.db.engines import transaction

    with one_line_errors(), transaction(obj.client.engine) as conn:
        yield conn


@click.group("profiles")
def profiles() -> None:
    """Persistent browser profiles (one account's logins and cookies each)."""


@profiles.command("list")
@click.pass_obj
def profiles_list(obj: Any) -> None:
    """Every profile with its host, state, jobs and blocks."""
    from scrapefleet.common import store

    with _transaction(obj) as conn:
        rows = store.list_profiles(conn)
    if not rows:
        echo("no profiles yet (a profile is listed once a job has used it)")
        return
    for line in profile_lines(rows, datetime.now(UTC)):
        echo(line)


@profiles.command("reset")
@click.argument("name")
@click.pass_obj
def profiles_reset(obj: Any, name: str) -> None:
    """End NAME's cool-down and forget its blocks (its host and data stay)."""
    from scrapefleet.common import store

    with _transaction(obj) as conn:
        store.reset_profile(conn, name)
    echo(f"profile {name} ready")


@profiles.command("move")
@click.argument("name")
@click.option("--to", "host", required=True, help="the host that holds the profile from now on")
@click.pass_obj
def profiles_move(obj: Any, name: str, host: str) -> None:
    """Bind NAME to HOST; copy its directory (profiles_dir/NAME) there yourself first."""
    from scrapefleet.common import store

    with _transaction(obj) as conn:
        store.move_profile(conn, name, host)
    echo(f"profile {name} now bound to {host} (its directory must be there)")


@profiles.command("cool")
@click.argument("name")
@click.option("--for", "duration", required=True, help="how long: 30m, 2h, 1h30m, 7d")
@click.pass_obj
def profiles_cool(obj: Any, name: str, duration: str) -> None:
    """Give NAME no job for a while."""
    from scrapefleet.common import store

    with one_line_errors():
        seconds = parse_duration(duration)
    with _transaction(obj) as conn:
        until = store.cool_profile(conn, name, seconds)
    echo(f"profile {name} cooling until {until:%Y-%m-%d %H:%M:%S %Z}")
