"""The registry of named actions: what a job's ``kind`` means.

An action is a plain function with a pydantic params model. Plain actions take ``(params)``;
browser actions take ``(driver, params)``: a warm Selenium session of the host's Grid whose
current window holds no cookie or storage of an earlier job, at the job's isolation level
(common.browser.isolation: the action's default, or the job's payload key ``isolation``): the
slot's tab cleared after every job (``"cleared"``, the default), a fresh user context
(``"context"``), or a browser started for the job alone (``"session"``); or, asked for
anonymous work, the slot's tab as the last job left it (``"shared"``). Both return a
JSON-serialisable dict,
stored as the job's result, or a ``Spawned`` (common.actions.spawn): a result and follow-up jobs.
A browser job's payload key ``browser`` (user agent, proxy, headers, cookies, window, locale,
timezone, blocked resource types: scrapefleet.common.browser.options) is validated here and
applied by the runner before the action runs; the action's params never see it.

    @register("prices", PricesParams, needs_browser=True)
    def prices(driver, params): ...

User actions are loaded from the ``actions`` setting and from installed packages:

- ``module``: importing it runs its ``@register`` decorators (every action it defines);
- ``module:function``: as above; a plain function not decorated is registered under its
  attribute name with free-form params;
- every entry point of the group ``scrapefleet.actions`` of an installed distribution (its
  value is ``module`` or ``module:function``): a team's package ships its actions by declaring
  ``[project.entry-points."scrapefleet.actions"] myteam = "myteam.scrapers"``.

A module that does not import, or a name that is not a function, raises SettingsError naming
it in one line: a consumer does not start with half its actions.

``register`` also takes an action's defaults for its jobs: ``timeout_s`` (a consumer's limit on
one attempt, instead of the host's ``job_timeout_s``), ``max_attempts``, ``priority``,
``rate_key`` and ``proxy_pool``, applied at submit wherever the job does not give its own.

Any job's payload may name a proxy pool (key ``proxy_pool``: common.identities.proxy_pools):
each attempt then goes out through a proxy of that pool, leased by the producer; the built-in
``http_get`` and every browser action use it, the params never see the key.

An action that returns within a millisecond and never waits (no network, no file, no sleep) may
say so with ``light``: a consumer then runs its jobs in the thread that claimed them, with no
hand-off to a worker thread and back, which at hundreds of jobs a second is most of what such a
job costs. ``light`` is True, or a function of the payload (``noop`` is light unless it sleeps).
A light job is not timed out (nothing can interrupt the claiming thread): an action that blocks
must not be light. A consumer logs a warning once per kind when one took over 100 ms.

An action says what kind of failure it met by raising ``Permanent`` (do not retry),
``RateLimited(reason, retry_after_s=None)`` (retry after the site's wait) or ``Blocked(reason)``
(the site refused us: back to pending without using an attempt); anything else it raises is a
transient failure, retried with backoff (common.actions.error_classes).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from scrapefleet.common.actions.error_classes import Blocked, Permanent, RateLimited
from scrapefleet.common.browser.isolation import (
    DEFAULT_ISOLATION,
    ISOLATION_KEY,
    Isolation,
    check_shared,
    validate_isolation,
)
from scrapefleet.common.browser.options import (
    BROWSER_KEY,
    NO_OPTIONS,
    BrowserOptions,
    cookie_domains_filled,
)
from scrapefleet.common.errors import SettingsError, SubmitError, UnknownAction
from scrapefleet.common.identities.proxy_pools import (
    PROXY_POOL_KEY,
    SESSION_KEY,
    session_key,
    validate_pool_name,
)
from scrapefleet.common.jobs.rate_limits import check_rate_key

__all__ = [
    "ENTRY_POINT_GROUP",
    "Action",
    "Blocked",
    "FreeParams",
    "Lightness",
    "Permanent",
    "RateLimited",
    "action_names",
    "get_action",
    "load_user_actions",
    "longest_time_limit_s",
    "register",
]


class FreeParams(BaseModel):
    """Params model of an undecorated user function: any JSON object."""

    model_config = ConfigDict(extra="allow")


# Whether a job of a light action runs in the claiming thread: True, False, or a function of
# the job's payload.
Lightness = bool | Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Action:
    name: str
    func: Callable[..., Any]
    params_model: type[BaseModel]
    needs_browser: bool = False
    isolation: Isolation = DEFAULT_ISOLATION  # a browser action's own default
    light: Lightness = False
    # Defaults for its jobs, each used where the job gives none (None: the host's or settings').
    timeout_s: float | None = None  # one attempt's limit on a consumer, else job_timeout_s
    max_attempts: int | None = None
    priority: int | None = None
    rate_key: str | None = None
    proxy_pool: str | None = None  # its jobs lease a proxy of this pool per attempt
    # The kinds its jobs may spawn besides their own (outside a crawl, which names its own):
    # its jobs carry them from submit (jobs.spawn_kinds), and the database inserts no child
    # of another kind (migration 0031).
    spawns: tuple[str, ...] = ()

    def time_limit_s(self, host_default_s: float) -> float:
        """How long one attempt may run on a host whose own limit is ``host_default_s``."""
        return self.timeout_s if self.timeout_s is not None else host_default_s

    def is_light(self, payload: Any) -> bool:
        """Whether this job may run in the claiming thread. A payload the function cannot read
        (it is validated only when the job runs) makes it not light: the worker thread reports
        the problem as for any other job."""
        if isinstance(self.light, bool):
            return self.light
        if not isinstance(payload, dict):
            return False
        try:
            return bool(self.light(payload))
        except Exception:
            return False

    def validate(self, payload: Any) -> BaseModel:
        """Validate a payload; SubmitError names the first bad field."""
        if not isinstance(payload, dict):
            raise SubmitError(f"payload of {self.name!r} must be a JSON object")
        isolation = self.isolation_of(payload) if self.needs_browser else self.isolation
        params_fields = self.params_model.model_fields
        if self.needs_browser and ISOLATION_KEY in payload and ISOLATION_KEY not in params_fields:
            payload = {k: v for k, v in payload.items() if k != ISOLATION_KEY}
        if self.needs_browser and BROWSER_KEY in payload:
            options = self.browser_options_of(payload)
            try:
                check_shared(isolation, not options.empty)
            except ValueError as exc:
                raise SubmitError(f"payload.{ISOLATION_KEY}: {exc}") from None
            if BROWSER_KEY not in self.params_model.model_fields:
                payload = {k: v for k, v in payload.items() if k != BROWSER_KEY}
        if PROXY_POOL_KEY in payload or SESSION_KEY in payload:
            self.proxy_session_of(payload)
            for key in (PROXY_POOL_KEY, SESSION_KEY):
                if key not in self.params_model.model_fields:
                    payload = {k: v for k, v in payload.items() if k != key}
        try:
            return self.params_model.model_validate(payload)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "payload"
            raise SubmitError(f"payload.{where}: {err['msg']}") from None

    def proxy_pool_of(self, payload: Any) -> str | None:
        """The proxy pool the job's attempts lease from: the payload's ``proxy_pool``, else the
        action's own; SubmitError for a bad name, or a job that also names its own proxy (a
        pool's proxy replaces it: the two cannot both be what it goes out with)."""
        if not isinstance(payload, dict):
            return self.proxy_pool
        options = payload.get(BROWSER_KEY)
        own = "proxy" if payload.get("proxy") is not None else None
        if isinstance(options, dict) and options.get("proxy") is not None:
            own = f"{BROWSER_KEY}.proxy"
        if payload.get(PROXY_POOL_KEY) is None:
            return None if own else self.proxy_pool  # a job's own proxy beats the default
        try:
            pool = validate_pool_name(payload[PROXY_POOL_KEY])
        except ValueError as exc:
            raise SubmitError(f"payload.{PROXY_POOL_KEY}: {exc}") from None
        if own is not None:
            where = own
            raise SubmitError(
                f"payload.{PROXY_POOL_KEY}: the job names its own proxy too (payload.{where});"
                " give one or the other"
            )
        return pool

    def proxy_session_of(self, payload: Any) -> str | None:
        """The job's sticky session key (payload ``session``: its proxy stays the same for
        its session's jobs), None for none; SubmitError when it is bad or has no pool."""
        pool = self.proxy_pool_of(payload)
        if not isinstance(payload, dict) or payload.get(SESSION_KEY) is None:
            return None
        if SESSION_KEY in self.params_model.model_fields and pool is None:
            return None  # the action's own param of that name
        if pool is None:
            raise SubmitError(f"payload.{SESSION_KEY}: a session needs a {PROXY_POOL_KEY}")
        try:
            return session_key(payload[SESSION_KEY], payload)
        except ValueError as exc:
            raise SubmitError(f"payload.{SESSION_KEY}: {exc}") from None

    def isolation_of(self, payload: Any) -> Isolation:
        """How a browser job is kept apart from the jobs before it: the payload's
        ``isolation`` when it names one, else the action's own; SubmitError if it is unknown."""
        if not isinstance(payload, dict) or ISOLATION_KEY not in payload:
            return self.isolation
        try:
            return validate_isolation(payload[ISOLATION_KEY])
        except ValueError as exc:
            raise SubmitError(f"payload.{ISOLATION_KEY}: {exc}") from None

    def browser_options_of(self, payload: Any) -> BrowserOptions:
        """The job's own browser options (payload key ``browser``; none -> every option unset),
        cookies without a domain given the payload url's host; SubmitError names the field."""
        if not self.needs_browser or not isinstance(payload, dict) or BROWSER_KEY not in payload:
            return NO_OPTIONS
        try:
            options = BrowserOptions.model_validate(payload[BROWSER_KEY])
            return cookie_domains_filled(options, payload)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            where = f"{BROWSER_KEY}.{where}" if where else BROWSER_KEY
            message = str(err["msg"]).removeprefix("Value error, ")
            raise SubmitError(f"payload.{where}: {message}") from None
        except ValueError as exc:
            raise SubmitError(f"payload.{BROWSER_KEY}.{exc}") from None


_REGISTRY: dict[str, Action] = {}
_LOCK = threading.Lock()
_BUILTINS_LOADED = False
# An action's default priority and max_attempts: within a submitted job's own bounds
# (common.jobs.submit_file).
PRIORITY_MIN, PRIORITY_MAX = -1_000_000, 1_000_000
MAX_ATTEMPTS_LIMIT = 100
ENTRY_POINT_GROUP = "scrapefleet.actions"  # installed packages' actions (load_user_actions)
# The browser actions' params are declared in the library; their Selenium implementations are
# registered when the consumer imports scrapefleet.consumer.browser.actions.selenium_actions.
BUILTIN_MODULES = (
    "scrapefleet.common.actions.builtin",
    "scrapefleet.common.crawl.action",
    "scrapefleet.common.actions.browser_params",
)


# The decorated function, returned as it came: a team's own type checker keeps its signature.
ActionFunc = TypeVar("ActionFunc", bound=Callable[..., Any])


def register(
    name: str,
    params_model: type[BaseModel] = FreeParams,
    *,
    needs_browser: bool = False,
    isolation: Isolation = DEFAULT_ISOLATION,
    light: Lightness = False,
    timeout_s: float | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    rate_key: str | None = None,
    proxy_pool: str | None = None,
    spawns: Iterable[str] = (),
) -> Callable[[ActionFunc], ActionFunc]:
    """Register the decorated function as the action ``name`` (see the module's docstring).
    The defaults are checked here, so a bad one stops the import that declares it."""
    isolation = validate_isolation(isolation)
    if needs_browser and light is not False:
        # A browser job waits on the browser for its whole run: never in the claiming thread.
        raise ValueError(f"action {name!r}: a browser action cannot be light")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"action {name!r}: timeout_s must be above 0, not {timeout_s!r}")
    if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"action {name!r}: max_attempts must be 1 to {MAX_ATTEMPTS_LIMIT}")
    if priority is not None and not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"action {name!r}: priority must be {PRIORITY_MIN} to {PRIORITY_MAX}")
    if rate_key is not None:
        rate_key = check_rate_key(rate_key)
    if proxy_pool is not None:
        proxy_pool = validate_pool_name(proxy_pool)

    def decorate(func: ActionFunc) -> ActionFunc:
        action = Action(
            name,
            func,
            params_model,
            needs_browser,
            isolation,
            light,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            priority=priority,
            rate_key=rate_key,
            proxy_pool=proxy_pool,
            spawns=tuple(spawns),
        )
        with _LOCK:
            _REGISTRY[name] = action
        func.__scrapefleet_action__ = name  # type: ignore[attr-defined]
        return func

    return decorate


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    for module in BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a real missing dependency inside the module
                raise
    _BUILTINS_LOADED = True


def load_user_actions(paths: Iterable[str], *, entry_points: bool = True) -> None:
    """Import the ``actions`` setting's 'module' and 'module:function' paths, then (unless
    ``entry_points`` is False) every installed package's ``scrapefleet.actions`` entry point.
    The first that fails raises SettingsError naming it in one line."""
    for path in paths:
        _load_path(path, "invalid setting actions")
    if entry_points:
        for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            package = point.dist.name if point.dist is not None else "an installed package"
            _load_path(
                point.value, f"entry point {point.name!r} of {package} ({ENTRY_POINT_GROUP})"
            )


def _load_path(path: str, where: str) -> None:
    module_name, colon, attr = path.strip().partition(":")
    if (
        not module_name
        or (colon and not attr)
        or not all(part.isidentifier() for part in module_name.split("."))
    ):
        raise SettingsError(f"{where}: {path!r} is not 'module' or 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a scraper module's own error at import is as fatal as a missing one
        raise SettingsError(
            f"{where}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not attr:
        return  # importing it ran its @register decorators
    func = getattr(module, attr, None)
    if not callable(func):
        raise SettingsError(f"{where}: {path!r} is not a function")
    if not hasattr(func, "__scrapefleet_action__"):
        register(attr)(func)


def get_action(kind: str) -> Action:
    _load_builtins()
    try:
        return _REGISTRY[kind]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise UnknownAction(f"unknown job kind {kind!r} (known: {known})") from None


def longest_time_limit_s(host_default_s: float) -> float:
    """The longest an attempt of any registered action may run on a host whose own limit is
    ``host_default_s``: how long a drain must wait for a job to end by itself."""
    _load_builtins()
    with _LOCK:
        actions = list(_REGISTRY.values())
    return max((a.time_limit_s(host_default_s) for a in actions), default=host_default_s)


def action_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def action_kinds() -> dict[str, str | None]:
    """Every registered kind, with the version of the installed distribution that provides its
    function's module (None: a module not installed as a package, e.g. a path on sys.path):
    what a consumer reports it can run (common.status.document ``kinds``)."""
    _load_builtins()
    with _LOCK:
        actions = dict(_REGISTRY)
    providers = _providers()
    versions: dict[str, str | None] = {}
    for kind, action in sorted(actions.items()):
        top = (getattr(action.func, "__module__", None) or "").partition(".")[0]
        versions[kind] = _version_of(tuple(providers.get(top, ())))
    return versions


# Read once a process (a scan of every installed distribution, ~0.1 s): a consumer runs the
# packages it started with; a rollout restarts it.
@functools.cache
def _providers() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@functools.cache
def _version_of(distributions: tuple[str, ...]) -> str | None:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
