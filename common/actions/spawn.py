"""Jobs that make jobs: what an action returns to spawn follow-up jobs, and its validation.

An action that wants follow-up jobs returns a ``Spawned`` instead of a plain dict:

    from scrapefleet.common.actions.spawn import Spawned

    @register("listing", spawns=["item"])  # the kinds besides its own it may spawn
    def listing(params):
        return Spawned(
            result={"items": 20},
            spawn=[{"kind": "item", "payload": {"url": u}, "dedupe_key": u} for u in links],
        )

A plain dict is a result as before: a result that happens to have a ``spawn`` key is data,
never children. Each entry is ``{kind, payload, dedupe_key?, priority?}`` (or a ``Child``).
The children are inserted in the same transaction that records the completion, and only if
that completion moves the job (common.store.spawn); there they get ``parent_id``, ``depth``
(the parent's + 1) and the parent's crawl, and are dropped beyond the crawl's ``max_depth``
or ``max_jobs``, or when the crawl has already seen their dedupe key.

``validate_spawn`` checks every entry before anything is written: one bad entry fails the
attempt (not retried: the action returns the same thing next time) with its index and field,
and none of its siblings is inserted.

A child goes out through the proxy pool it names, else its action's default pool, else (unless
it names a proxy of its own) its parent's pool and sticky session (``inherited``): a crawl
through a pool stays in it. The pool is written into the child's payload, from which the
database sets the row's pool and session (migration 0038) as submit does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapefleet.common.browser.options import BROWSER_KEY
from scrapefleet.common.browser.profile_names import PROFILE_KEY, payload_profile_pool
from scrapefleet.common.errors import ScrapefleetError, SubmitError, UnknownAction
from scrapefleet.common.identities.proxy_pools import PROXY_POOL_KEY, SESSION_KEY

MAX_SPAWN_PER_ATTEMPT = 1000  # children one attempt may return (the database refuses more too)
MAX_DEDUPE_KEY_CHARS = 2048
PRIORITY_RANGE = (-1_000_000, 1_000_000)  # as a submitted job's
ENTRY_KEYS = frozenset({"kind", "payload", "dedupe_key", "priority"})


class SpawnError(ScrapefleetError):
    """An action's spawn list cannot be inserted; the message names the entry and field."""


@dataclass(frozen=True)
class Child:
    """One follow-up job, validated (``needs_browser`` comes from its action)."""

    kind: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    priority: int | None = None  # None: the parent's; above it, the database makes it the parent's
    needs_browser: bool = False

    def as_json(self) -> dict[str, Any]:
        """The entry as the database function spawn_children reads it."""
        entry: dict[str, Any] = {
            "kind": self.kind,
            "payload": self.payload,
            "needs_browser": self.needs_browser,
        }
        if self.dedupe_key is not None:
            entry["dedupe_key"] = self.dedupe_key
        if self.priority is not None:
            entry["priority"] = self.priority
        return entry


@dataclass(frozen=True)
class Spawned:
    """An action's result together with the jobs to insert when it is recorded."""

    result: dict[str, Any]
    spawn: Iterable[Mapping[str, Any] | Child] = field(default_factory=tuple)


def validate_spawn(
    entries: Any, inherited: Mapping[str, Any] | None = None, leased_proxy: str | None = None
) -> tuple[Child, ...]:
    """Every entry checked against the action registry and the bounds; SpawnError names the
    first bad entry's index and field. ``inherited``: the parent's ``proxy_pool`` and
    ``session`` (payload keys), for children that name no pool and no proxy of their own.
    ``leased_proxy``: the URL (credentials included) of the proxy the parent's attempt leased,
    which the action was given as its own: taken out of any child that carries it on (a
    crawl's children copy their parent's params), never written into a row."""
    if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Iterable):
        raise SpawnError(f"spawn must be a list of entries, not {type(entries).__name__}")
    entries = list(entries)
    if len(entries) > MAX_SPAWN_PER_ATTEMPT:
        raise SpawnError(
            f"spawn: {len(entries)} entries, at most {MAX_SPAWN_PER_ATTEMPT} per attempt"
        )
    return tuple(
        _child(index, entry, inherited or {}, leased_proxy) for index, entry in enumerate(entries)
    )


def _child(index: int, entry: Any, inherited: Mapping[str, Any], leased_proxy: str | None) -> Child:
    where = f"spawn[{index}]"
    if isinstance(entry, Child):  # checked again: it may have been built by hand
        entry = {k: v for k, v in entry.as_json().items() if k in ENTRY_KEYS}
    if not isinstance(entry, Mapping):
        raise SpawnError(f"{where}: must be an object, not {type(entry).__name__}")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise SpawnError(
            f"{where}.{unknown[0]}: unknown field (allowed: kind, payload, dedupe_key, priority)"
        )
    kind, payload = entry.get("kind"), entry.get("payload")
    if not isinstance(kind, str) or not kind:
        raise SpawnError(f"{where}.kind: must be a job kind (a non-empty string)")
    if not isinstance(payload, dict):
        raise SpawnError(f"{where}.payload: must be an object, not {type(payload).__name__}")
    # Imported here: the registry loads the built-in actions, which import this module.
    from scrapefleet.common.actions.registry import get_action

    try:
        action = get_action(kind)
        payload = _with_pool(action, _without(payload, leased_proxy), inherited)
        action.validate(payload)
    except UnknownAction as exc:
        raise SpawnError(f"{where}.kind: {exc}") from None
    except SubmitError as exc:
        raise SpawnError(f"{where}.{exc}") from None
    if payload_profile_pool(payload):
        # The producer binds a profile only to a submitted job (its profile_pool column): a
        # child would run without it, logged out, and say nothing.
        raise SpawnError(
            f"{where}.payload.browser.{PROFILE_KEY}: a spawned job cannot run in a profile;"
            " submit jobs that need one"
        )
    dedupe_key = entry.get("dedupe_key")
    if dedupe_key is not None:
        if not isinstance(dedupe_key, str) or not dedupe_key:
            raise SpawnError(f"{where}.dedupe_key: must be a non-empty string")
        if len(dedupe_key) > MAX_DEDUPE_KEY_CHARS:
            raise SpawnError(
                f"{where}.dedupe_key: {len(dedupe_key)} characters, at most {MAX_DEDUPE_KEY_CHARS}"
            )
    priority = entry.get("priority")
    if priority is not None:
        low, high = PRIORITY_RANGE
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise SpawnError(f"{where}.priority: must be an integer")
        if not low <= priority <= high:
            raise SpawnError(f"{where}.priority: must be between {low} and {high}")
    return Child(kind, payload, dedupe_key, priority, action.needs_browser)


def _with_pool(
    action: Any, payload: dict[str, Any], inherited: Mapping[str, Any]
) -> dict[str, Any]:
    """``payload`` with the pool it goes out through named in it: its own, its action's
    default, else its parent's (with the parent's session when that fits it: a ``"site"``
    session is the child's own site's). SubmitError as submit's."""
    pool = action.proxy_pool_of(payload)
    if pool is not None:
        return payload if payload.get(PROXY_POOL_KEY) else {**payload, PROXY_POOL_KEY: pool}
    options = payload.get(BROWSER_KEY)
    own_proxy = payload.get("proxy") is not None or (
        isinstance(options, dict) and options.get("proxy") is not None
    )
    if own_proxy or inherited.get(PROXY_POOL_KEY) is None:
        return payload
    with_pool = {**payload, PROXY_POOL_KEY: inherited[PROXY_POOL_KEY]}
    if payload.get(SESSION_KEY) is not None or inherited.get(SESSION_KEY) is None:
        return with_pool
    with_session = {**with_pool, SESSION_KEY: inherited[SESSION_KEY]}
    try:
        action.proxy_session_of(with_session)
    except SubmitError:
        return with_pool  # the parent's session does not fit it (a "site" without a url)
    return with_session


def _without(payload: dict[str, Any], leased_proxy: str | None) -> dict[str, Any]:
    """``payload`` without the parent's leased proxy where it carries it as its own."""
    if leased_proxy is None:
        return payload
    if payload.get("proxy") == leased_proxy:
        payload = {k: v for k, v in payload.items() if k != "proxy"}
    options = payload.get(BROWSER_KEY)
    if isinstance(options, dict) and options.get("proxy") == leased_proxy:
        kept = {k: v for k, v in options.items() if k != "proxy"}
        payload = (
            {**payload, BROWSER_KEY: kept}
            if kept
            else {k: v for k, v in payload.items() if k != BROWSER_KEY}
        )
    return payload
