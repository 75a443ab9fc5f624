"""`scrapefleet controls`: pause one site, kind or crawl, or change its limits, live.

    scrapefleet controls pause --key shop.example --reason "they asked us to stop until 9am"
    scrapefleet controls resume --key shop.example
    scrapefleet controls limit --kind prices --concurrency 4 --per-minute 60 --reason "..."
    scrapefleet controls unlimit --kind prices
    scrapefleet controls pause --crawl 4711
    scrapefleet controls list           what an operator holds now
    scrapefleet controls history        every change: who, when, before and after, why

The producer applies a change from its next cycle, without a restart: a paused key's, kind's
or crawl's pending jobs wait (those running finish); a live limit replaces the settings
file's for that key or kind, which stays the default once the live one is cleared. Every change
is recorded in ``control_changes``. A change that changes nothing says so and exits 1.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

import click

from scrapefleet.common.ops.cli_context import echo
from scrapefleet.common.ops.one_line_errors import one_line_errors

REASON_MAX_CHARS = 500


def who() -> str:
    """The operator as the log and the audit show them: the CLI and the login name."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container's)
        return "cli"


def target(key: str | None, kind: str | None, crawl: int | None) -> tuple[str, str]:
    """(scope, name) of exactly one of --key, --kind, --crawl; click.UsageError names why not."""
    given = [(s, v) for s, v in (("rate_key", key), ("kind", kind), ("crawl", crawl)) if v]
    if len(given) != 1:
        raise click.UsageError("name exactly one of --key, --kind or --crawl")
    from scrapefleet.common.store.operating.controls import NAME_MAX_CHARS

    scope, value = given[0]
    name = str(value).strip()
    if not 1 <= len(name) <= NAME_MAX_CHARS or not name.isprintable():
        option = {"rate_key": "--key", "kind": "--kind", "crawl": "--crawl"}[scope]
        raise click.BadParameter(
            f"1 to {NAME_MAX_CHARS} printable characters, not {name[:40]!r}", param_hint=option
        )
    return scope, name


def _target_options(func: Any) -> Any:
    func = click.option("--reason", help="why (kept in control_changes, shown by list)")(func)
    func = click.option("--crawl", type=click.IntRange(1), help="a crawl, by its id")(func)
    func = click.option("--kind", help="a job kind")(func)
    return click.option("--key", help="a rate key (a site: by default its host name)")(func)


def _reason(reason: str | None) -> str | None:
    text = (reason or "").strip()
    if len(text) > REASON_MAX_CHARS:
        raise click.BadParameter(f"at most {REASON_MAX_CHARS} characters", param_hint="--reason")
    return text or None


@click.group("controls")
def controls() -> None:
    """Pause or limit one rate key, kind or crawl, live; list and audit the changes."""


def _apply(
    obj: Any,
    change: str,
    scope: str,
    name: str,
    reason: str | None,
    limits: tuple[int | None, int | None] = (None, None),
) -> None:
    from scrapefleet.common import store
    from scrapefleet.common.db.engines import transaction, wrapped_errors

    with one_line_errors(), wrapped_errors(), transaction(obj.client.engine) as conn:
        changed = store.change_control(
            conn,
            store.Scope(scope),
            name,
            store.ControlChange(change),
            who(),
            _reason(reason),
            store.LiveControl(False, *limits),
        )
    what = f"{store.scope_words(store.Scope(scope))} {name}"
    if not changed:
        unchanged = store.unchanged_words(store.ControlChange(change))
        echo(f"error: {what} {unchanged}: nothing changed (`controls list`)", err=True)
        raise SystemExit(1)
    echo(f"{what}: {change} applied from the producer's next cycle")


@controls.command("pause")
@_target_options
@click.pass_obj
def pause(
    obj: Any, key: str | None, kind: str | None, crawl: int | None, reason: str | None
) -> None:
    """Its pending jobs are not assigned until resumed (running ones finish)."""
    _apply(obj, "pause", *target(key, kind, crawl), reason)


@controls.command("resume")
@_target_options
@click.pass_obj
def resume(
    obj: Any, key: str | None, kind: str | None, crawl: int | None, reason: str | None
) -> None:
    """Assign its jobs again."""
    _apply(obj, "resume", *target(key, kind, crawl), reason)


@controls.command("limit")
@_target_options
@click.option("--concurrency", type=click.IntRange(1), help="queued + running at once, fleet-wide")
@click.option("--per-minute", type=click.IntRange(1), help="attempts started per trailing minute")
@click.pass_obj
def limit(
    obj: Any,
    key: str | None,
    kind: str | None,
    crawl: int | None,
    reason: str | None,
    concurrency: int | None,
    per_minute: int | None,
) -> None:
    """Replace a key's or kind's configured limits until `unlimit`."""
    scope, name = target(key, kind, crawl)
    if scope == "crawl":
        raise click.UsageError("a crawl can be paused, not limited: limit its site (--key)")
    if concurrency is None and per_minute is None:
        raise click.UsageError("give --concurrency, --per-minute or both")
    _apply(obj, "limit", scope, name, reason, (concurrency, per_minute))


@controls.command("unlimit")
@_target_options
@click.pass_obj
def unlimit(
    obj: Any, key: str | None, kind: str | None, crawl: int | None, reason: str | None
) -> None:
    """Back to the settings file's limits for that key or kind."""
    _apply(obj, "unlimit", *target(key, kind, crawl), reason)


@controls.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one control each")
@click.pass_obj
def list_controls(obj: Any, as_json: bool) -> None:
    """What an operator holds now: pauses and live limits, with who, when and why."""
    from scrapefleet.common.db.engines import wrapped_errors
    from scrapefleet.common.reads.live_control_rows import control_rows

    with one_line_errors(), wrapped_errors(), obj.read_engine().connect() as conn:
        rows = control_rows(conn)
    if as_json:
        for row in rows:
            echo(json.dumps(row, default=str))
        return
    if not rows:
        echo("nothing paused or limited live: the settings file's limits apply")
        return
    for row in rows:
        held = ["paused"] if row["paused"] else []
        if row["concurrency"] is not None:
            held.append(f"concurrency {row['concurrency']}")
        if row["per_minute"] is not None:
            held.append(f"{row['per_minute']}/min")
        why = f": {row['reason']}" if row["reason"] else ""
        echo(
            f"{row['scope']:<8} {row['name']:<30} {', '.join(held):<32}"
            f" by {row['changed_by']} at {row['changed_at']:%Y-%m-%d %H:%M:%S %Z}{why}"
        )


@controls.command("history")
@click.option("--limit", "rows", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_obj
def history(obj: Any, rows: int) -> None:
    """Every live control change, newest first: who, when, what, before and after, why."""
    from scrapefleet.common.db.engines import wrapped_errors
    from scrapefleet.common.reads.live_control_rows import control_changes

    with one_line_errors(), wrapped_errors(), obj.read_engine().connect() as conn:
        changes = control_changes(conn, rows)
    if not changes:
        echo("no live control was ever changed")
        return
    for c in changes:
        why = f": {c.reason}" if c.reason else ""
        echo(
            f"{c.at:%Y-%m-%d %H:%M:%S %Z} {c.changed_by} {c.change} {c.scope} {c.name}"
            f" ({json.dumps(c.before)} -> {json.dumps(c.after)}){why}"
        )
