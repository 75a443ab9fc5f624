"""`scrapefleet proxies`: the operator's commands on proxy pools (common.identities.proxy_pools).

    scrapefleet proxies add POOL URL...         add proxies (the pool is made if new); a proxy
                                                already there gets the credentials given now
    scrapefleet proxies import POOL FILE        the same, one URL a line ('-': standard input)
    scrapefleet proxies list [POOL]             state, jobs in flight, blocks, cool-down, ban
    scrapefleet proxies pools                   every pool and its settings
    scrapefleet proxies pool POOL --max-jobs-per-proxy 2 --cooldown 2m ...
    scrapefleet proxies pool cheap --next-pool residential --escalate-after 2   (tiers)
    scrapefleet proxies disable|enable POOL URL...
    scrapefleet proxies reset POOL [URL...]     forget cool-downs, bans and back-off
    scrapefleet proxies remove POOL URL...      refused while a job holds one

A proxy is named by its URL, with or without its credentials (they are not compared). A
password given is stored in ``proxy_credentials`` and never shown back: every answer shows the
URL with ``***@`` where credentials are. Bad input is one line naming the argument or the
file's line, exit 2, and nothing written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from scrapefleet.common.errors import SubmitError
from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.commands.profiles_command import parse_duration
from scrapefleet.common.ops.one_line_errors import one_line_errors

MAX_FILE_BYTES = 16 * 1024 * 1024


@contextmanager
def _transaction(obj: Any) -> Iterator[Any]:
    from scrapefleet.common.db.engines import transaction

    with one_line_errors(), transaction(obj.client.engine) as conn:
        yield conn


def _pool(name: str) -> str:
    from scrapefleet.common.identities.proxy_pools import validate_pool_name

    try:
        return validate_pool_name(name)
    except ValueError as exc:
        raise SubmitError(f"POOL: {exc}") from None


def _entries(urls: tuple[str, ...]) -> list[Any]:
    """The command line's URLs, each checked; the first bad one named by its position (never
    repeated: it may hold a password)."""
    from scrapefleet.common.identities.proxy_pools import parse_proxy_lines

    try:
        return parse_proxy_lines(list(urls))
    except ValueError as exc:
        raise SubmitError(f"URL {str(exc).replace('line ', '#', 1)}") from None


def _bare_urls(urls: tuple[str, ...]) -> list[str]:
    return [entry.url for entry in _entries(urls)]


def _add(obj: Any, pool: str, entries: list[Any], where: str) -> None:
    from scrapefleet.common import store

    if not entries:
        raise SubmitError(f"{where}: no proxy given")
    with _transaction(obj) as conn:
        added, updated = store.add_proxies(conn, pool, entries)
    echo(f"pool {pool}: {added} proxies added, {updated} updated")


@click.group("proxies")
def proxies() -> None:
    """Proxy pools: proxies the fleet leases to jobs that ask for a pool."""


@proxies.command("add")
@click.argument("pool")
@click.argument("urls", nargs=-1, required=True)
@click.pass_obj
def proxies_add(obj: Any, pool: str, urls: tuple[str, ...]) -> None:
    """Add proxies (scheme://[user:password@]host:port) to POOL. A password on a command line
    is seen by `ps` and the shell's history: `proxies import` reads a file instead."""
    with one_line_errors():
        _add(obj, _pool(pool), _entries(urls), "URL")


@proxies.command("import")
@click.argument("pool")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.pass_obj
def proxies_import(obj: Any, pool: str, file: str) -> None:
    """Add the proxies of FILE to POOL: one URL a line, blank lines and '#' comments skipped.
    Every line is checked first; one bad line adds nothing."""
    from scrapefleet.common.identities.proxy_pools import parse_proxy_lines

    with one_line_errors():
        name = _pool(pool)
        try:
            raw = sys.stdin.buffer.read() if file == "-" else _read(file)
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SubmitError(f"{file}: cannot read it: {type(exc).__name__}") from None
        try:
            entries = parse_proxy_lines(text.splitlines())
        except ValueError as exc:
            raise SubmitError(f"{file}: {exc}") from None
        _add(obj, name, entries, file)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise SubmitError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return raw


def proxy_lines(rows: list[dict[str, Any]], now: datetime) -> Iterator[str]:
    yield (
        f"{'pool':<14} {'proxy':<40} {'state':<16} {'now':>4} {'jobs':>6} {'blocks':>6}"
        f" {'errors':>6}  last used"
    )
    for row in rows:
        used = row["last_used_at"]
        yield (
            f"{row['pool']:<14} {row['url']:<40} {_state_now(row, now):<16}"
            f" {row['in_flight']:>4} {row['jobs']:>6} {row['blocks']:>6} {row['errors']:>6}"
            f"  {f'{used:%Y-%m-%d %H:%M:%S}' if used else '-'}"
        )


def _state_now(row: dict[str, Any], now: datetime) -> str:
    state = str(row["state"])
    until = {"cooling": row["cooldown_until"], "banned": row["banned_until"]}.get(state)
    if until is None:
        return state
    minutes = max(1, int((until - now).total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    return f"{state} {hours}h{minutes:02d}m" if hours else f"{state} {minutes}m"


@proxies.command("list")
@click.argument("pool", required=False)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per proxy")
@click.pass_obj
def proxies_list(obj: Any, pool: str | None, as_json: bool) -> None:
    """Every proxy (of POOL): state, jobs now, jobs, blocks, errors, last use."""
    from scrapefleet.common import store

    with one_line_errors():
        name = None if pool is None else _pool(pool)
    with _transaction(obj) as conn:
        rows = store.list_proxies(conn, name)
    if as_json:
        for row in rows:
            echo(json.dumps(row, default=str))
        return
    if not rows:
        echo("no proxies" + (f" in pool {pool}" if pool else ""))
        return
    for line in proxy_lines(rows, datetime.now(UTC)):
        echo(line)


@proxies.command("pools")
@click.pass_obj
def proxies_pools(obj: Any) -> None:
    """Every pool with its settings and its number of proxies."""
    from scrapefleet.common import store

    with _transaction(obj) as conn:
        rows = store.list_pools(conn)
    if not rows:
        echo("no proxy pools (`scrapefleet proxies add POOL URL...` makes one)")
    for row in rows:
        echo(
            f"{row['name']}: {row['proxies']} proxies, {row['max_jobs_per_proxy']} job(s) at"
            f" once per proxy; a block cools {row['cooldown_s']:g}-{row['max_cooldown_s']:g} s;"
            f" {row['ban_blocks']} blocks in {row['ban_window_s']:g} s ban for"
            f" {row['ban_s']:g} s; unreachable: {row['error_cooldown_s']:g} s;"
            f" block statuses {','.join(str(s) for s in row['block_statuses'])};"
            f" a sticky session's proxy serves {row['session_max_uses']} of its jobs"
            + (
                f"; after {row['escalate_after_blocks']} blocks of a job: pool {row['next_pool']}"
                if row["next_pool"]
                else ""
            )
        )


def _seconds(text: str | None, option: str) -> float | None:
    return None if text is None else parse_duration(text, option)


@proxies.command("pool")
@click.argument("pool")
@click.option("--max-jobs-per-proxy", type=click.IntRange(1, 1000), help="jobs at once per proxy")
@click.option("--cooldown", help="a first block's cool-down (30s, 2m); doubled per block")
@click.option("--max-cooldown", help="the longest cool-down")
@click.option("--ban-blocks", type=click.IntRange(0, 10_000), help="blocks that ban (0: never)")
@click.option("--ban-window", help="within this long (1h)")
@click.option("--ban-for", help="how long a ban lasts (1d)")
@click.option("--error-cooldown", help="an unreachable proxy's cool-down")
@click.option("--next-pool", help="tiers: where a job blocked here goes next ('' for none)")
@click.option(
    "--escalate-after", type=click.IntRange(1, 100), help="blocks of one job before it goes"
)
@click.option("--session-max-uses", type=click.IntRange(1, 100_000), help="a sticky session's jobs")
@click.option("--block-statuses", help="HTTP statuses that mean a block (403,429)")
@click.pass_obj
def proxies_pool(obj: Any, pool: str, **options: Any) -> None:
    """Change POOL's settings."""
    from scrapefleet.common import store

    with one_line_errors():
        name = _pool(pool)
        next_pool: str | object | None = store.NO_CHANGE
        if options["next_pool"] is not None:
            next_pool = _pool(options["next_pool"]) if options["next_pool"] else None
            if next_pool == name:
                raise SubmitError("--next-pool: a pool cannot escalate to itself")
        settings: dict[str, float | int | None] = {
            "max_jobs_per_proxy": options["max_jobs_per_proxy"],
            "ban_blocks": options["ban_blocks"],
            "cooldown_s": _seconds(options["cooldown"], "--cooldown"),
            "max_cooldown_s": _seconds(options["max_cooldown"], "--max-cooldown"),
            "ban_window_s": _seconds(options["ban_window"], "--ban-window"),
            "ban_s": _seconds(options["ban_for"], "--ban-for"),
            "error_cooldown_s": _seconds(options["error_cooldown"], "--error-cooldown"),
            "escalate_after_blocks": options["escalate_after"],
            "session_max_uses": options["session_max_uses"],
        }
        from scrapefleet.common.identities.proxy_pools import parse_block_statuses

        statuses = None
        if options["block_statuses"] is not None:
            try:
                statuses = parse_block_statuses(options["block_statuses"])
            except ValueError as exc:
                raise SubmitError(f"--block-statuses: {exc}") from None
        unchanged = all(v is None for v in settings.values()) and statuses is None
        if unchanged and next_pool is store.NO_CHANGE:
            raise SubmitError("give at least one setting to change (see --help)")
    with _transaction(obj) as conn:
        row = next((r for r in store.list_pools(conn) if r["name"] == name), None)
        if row is not None:
            merged = {**row, **{k: v for k, v in settings.items() if v is not None}}
            if merged["max_cooldown_s"] < merged["cooldown_s"]:
                raise SubmitError("--max-cooldown: must not be below --cooldown")
        # NotFound names an unknown pool
        store.set_pool(conn, name, settings, next_pool, block_statuses=statuses)
    echo(f"pool {name} updated")


def _switch(obj: Any, pool: str, urls: tuple[str, ...], disabled: bool) -> None:
    from scrapefleet.common import store

    with one_line_errors():
        name, bare = _pool(pool), _bare_urls(urls)
    with _transaction(obj) as conn:
        done = store.set_proxies_disabled(conn, name, bare, disabled)
    echo(f"pool {name}: {len(done)} proxies {'disabled' if disabled else 'enabled'}")


@proxies.command("disable")
@click.argument("pool")
@click.argument("urls", nargs=-1, required=True)
@click.pass_obj
def proxies_disable(obj: Any, pool: str, urls: tuple[str, ...]) -> None:
    """Lease these proxies to no job until enabled (jobs holding one now run on)."""
    _switch(obj, pool, urls, True)


@proxies.command("enable")
@click.argument("pool")
@click.argument("urls", nargs=-1, required=True)
@click.pass_obj
def proxies_enable(obj: Any, pool: str, urls: tuple[str, ...]) -> None:
    """Lease these proxies again (a ban or cool-down still running stays: `reset` ends it)."""
    _switch(obj, pool, urls, False)


@proxies.command("reset")
@click.argument("pool")
@click.argument("urls", nargs=-1)
@click.pass_obj
def proxies_reset(obj: Any, pool: str, urls: tuple[str, ...]) -> None:
    """End these proxies' cool-downs and bans and forget their back-off (none named: the
    whole pool's)."""
    from scrapefleet.common import store

    with one_line_errors():
        name = _pool(pool)
        bare = _bare_urls(urls) if urls else None
    with _transaction(obj) as conn:
        done = store.reset_proxies(conn, name, bare)
    echo(f"pool {name}: {len(done)} proxies reset")


@proxies.command("remove")
@click.argument("pool")
@click.argument("urls", nargs=-1, required=True)
@click.pass_obj
def proxies_remove(obj: Any, pool: str, urls: tuple[str, ...]) -> None:
    """Remove these proxies and their credentials (refused while a job holds one)."""
    from scrapefleet.common import store

    with one_line_errors():
        name, bare = _pool(pool), _bare_urls(urls)
    with _transaction(obj) as conn:
        done = store.remove_proxies(conn, name, bare)
    echo(f"pool {name}: {len(done)} proxies removed")
