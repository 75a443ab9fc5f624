"""Run one claimed job: look up its action, validate its params, call it, say how it ended.

No database, no threads, no status files: the daemon (consumer.daemon) does the I/O around it,
so every way a job can end is unit-testable here.

- ``completed``: the action returned a JSON-serialisable dict (the job's result), or a
  ``Spawned`` (common.actions.spawn: a result and follow-up jobs, every entry valid, else
  ``failed``);
- ``failed``: the action raised (``error`` is the full traceback) or the job cannot run here
  (unknown kind, params that do not validate: ``retryable`` False, trying again cannot help);
- ``released``: the host, not the job, failed (a browser stack with no session to give, a
  StackError from the action): the job goes back to pending without using an attempt;
- ``blocked``: the site refused this scraper (the action raised ``Blocked``): back to pending
  without using an attempt, bounded (store.release_blocked).

A failure carries its class (common.actions.error_classes.classify of what the action raised): a
``permanent`` one is not retried, a ``rate_limited`` one carries the wait its site asked for.

Browser actions get their driver from ``lease(isolation)``, a context manager (the browser
stack's session pool plugs its own in: consumer.browser.sessions.session_pool) held for the action
and the failure capture; ``driver_factory`` (a new driver per job, quit after it) is the simpler
form tests use. Inside the lease the job's browser options (its payload's ``browser`` over the
host's ``browser_defaults``) are applied and its requests logged
(consumer.browser.actions.job_setup) before the action runs; a failure capture finds that log
(consumer.browser.actions.network_log). ``capture_failure`` (optional) saves screenshots and HTML of
a failed browser attempt and returns their paths.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from scrapefleet.common import tracing
from scrapefleet.common.actions.error_classes import ErrorClass, classify, reason_of, retry_after_of
from scrapefleet.common.actions.registry import Action, get_action
from scrapefleet.common.actions.spawn import Child, Spawned, SpawnError, validate_spawn
from scrapefleet.common.browser.isolation import Isolation, with_options
from scrapefleet.common.browser.options import NO_OPTIONS, BrowserOptions
from scrapefleet.common.constants import RESULT_MAX_BYTES
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import StackError, SubmitError, UnknownAction, timed_out
from scrapefleet.common.http.session_jar import HttpSession, in_session, stored_jar
from scrapefleet.common.identities.proxy_pools import PROXY_POOL_KEY, SESSION_KEY
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions import (  # noqa: F401  (they register the browser actions)
    crawl_browser,
    renderer_deaths,
    selenium_actions,
)
from scrapefleet.consumer.browser.actions.block_detection import (
    NO_RULES,
    BlockRules,
    blocking_rules,
)
from scrapefleet.consumer.browser.actions.job_setup import job_browser
from scrapefleet.consumer.browser.actions.selenium_actions import screenshots_into
from scrapefleet.consumer.proxy_use import proxy_verdict, scrub, with_leased_proxy

DriverFactory = Callable[[], Any]
# isolation -> a context manager giving the job's driver; entering it raises when the host has
# no session to give (the job is then released, not failed).
DriverLease = Callable[[Isolation], AbstractContextManager[Any]]
HostStarved = Callable[[], "str | None"]
# (driver or None, job id, attempt, traceback text) -> artifact paths; must not raise.
CaptureFailure = Callable[[Any, int, int, str], dict[str, Any]]

LEASE = "scrapefleet.browser.lease"
OutcomeStatus = Literal["completed", "failed", "released", "blocked"]


@dataclass(frozen=True)
class Outcome:
    status: OutcomeStatus
    result: dict[str, Any] | None = None
    error: str | None = None  # the traceback (failed) or the reason (released)
    retryable: bool = True  # False: fail now, whatever attempts are left
    artifacts: dict[str, Any] | None = None
    spawn: tuple[Child, ...] = ()  # completed: the follow-up jobs recorded with it
    error_class: ErrorClass | None = None  # failed or blocked: what kind of failure
    retry_after_s: float | None = None  # rate limited: the wait the site asked for
    reason: str | None = None  # blocked: what the site or the action said
    slow: bool = False  # released because the stack answered too late (a timeout)
    # Written while the attempt's thread still runs (a timeout): its lock key stays held until
    # the thread has returned and the host said so (store.attempts_ended).
    still_running: bool = False
    # Released because the browser died under the job's page: counted towards the job's bound
    # of such releases (store.release_job). Every other release is the host's own fault.
    by_page: bool = False
    # Failed because the attempt's leased proxy could not be reached (consumer.proxy_use):
    # the proxy is charged an error as the failure is written.
    proxy_error: bool = False
    # Completed in a sticky session: its jar (a JSON list) and user agent, kept with it.
    session_kept: tuple[list[dict[str, Any]], str | None] | None = field(default=None, repr=False)

    @classmethod
    def completed(cls, result: dict[str, Any], spawn: tuple[Child, ...] = ()) -> Outcome:
        return cls("completed", result=result, spawn=spawn)

    @classmethod
    def failed(
        cls,
        error: str,
        *,
        retryable: bool = True,
        artifacts: dict[str, Any] | None = None,
        error_class: ErrorClass | None = None,
        retry_after_s: float | None = None,
    ) -> Outcome:
        """``retryable`` False is a permanent error; a permanent error is never retryable."""
        if error_class is None:
            error_class = ErrorClass.TRANSIENT if retryable else ErrorClass.PERMANENT
        return cls(
            "failed",
            error=error,
            retryable=retryable and error_class is not ErrorClass.PERMANENT,
            artifacts=artifacts,
            error_class=error_class,
            retry_after_s=retry_after_s,
        )

    @classmethod
    def released(
        cls, reason: str, cause: BaseException | None = None, *, on_page: bool = False
    ) -> Outcome:
        """Handed back for the host's sake; ``cause`` says whether that was a timeout.
        ``on_page``: the stack failed while the action ran the job's page; unless that was a
        timeout (a slow or starved host), the page is taken to have caused it."""
        slow = cause is not None and timed_out(cause)
        return cls("released", error=reason, slow=slow, by_page=on_page and not slow)

    @classmethod
    def blocked(cls, reason: str, error: str, artifacts: dict[str, Any] | None = None) -> Outcome:
        return cls(
            "blocked",
            error=error,
            artifacts=artifacts,
            error_class=ErrorClass.BLOCKED,
            reason=reason,
        )

    @classmethod
    def raised(cls, exc: BaseException, error: str, artifacts: dict[str, Any] | None) -> Outcome:
        """How an attempt whose action raised ``exc`` (``error``: its traceback) ended."""
        error_class = classify(exc)
        if error_class is ErrorClass.BLOCKED:
            return cls.blocked(reason_of(exc), error, artifacts)
        return cls.failed(
            error,
            artifacts=artifacts,
            error_class=error_class,
            retry_after_s=retry_after_of(exc),
        )


def leases_from(factory: DriverFactory) -> DriverLease:
    """A lease that starts a driver per job and always quits it."""

    @contextlib.contextmanager
    def lease(_isolation: Isolation) -> Iterator[Any]:
        driver = factory()
        try:
            yield driver
        finally:
            with contextlib.suppress(Exception):
                driver.quit()

    return lease


def run_job(
    job: ClaimedJob,
    *,
    lease: DriverLease | None = None,
    driver_factory: DriverFactory | None = None,
    capture_failure: CaptureFailure | None = None,
    browser_defaults: BrowserOptions = NO_OPTIONS,
    block_rules: BlockRules = NO_RULES,
    host_starved: HostStarved = lambda: None,
    result_max_bytes: int = RESULT_MAX_BYTES,
    artifacts_dir: Path | None = None,
) -> Outcome:
    """Run ``job`` in the calling thread and return how it ended. Never raises.
    ``block_rules``: how a built-in browser action knows a block page (the host's settings;
    for an attempt through a pool's proxy, the pool's block statuses too).
    ``host_starved``: why the host is starved of CPU or memory now, else None: a browser
    action that times out meanwhile is released (the host's fault), not failed.
    ``result_max_bytes``: a larger result fails the job (the database would refuse it).
    ``artifacts_dir``: the host's (settings.artifacts_dir), where a screenshot that names no
    folder goes; None refuses such a screenshot."""
    if job.proxy_id is not None and job.proxy_block_statuses:
        # A pool names the statuses that mean its exit address was refused: a browser page
        # answered with one is the proxy's block, whatever the host's own rules say.
        pool_statuses = block_rules.statuses | frozenset(job.proxy_block_statuses)
        block_rules = replace(block_rules, statuses=pool_statuses)
    with blocking_rules(block_rules), screenshots_into(artifacts_dir):
        outcome = _run_job(
            job, lease, driver_factory, capture_failure, browser_defaults, host_starved
        )
    outcome = bounded_result(job.kind, outcome, result_max_bytes)
    if job.proxy_url is None:
        return outcome
    # Nothing an attempt leaves behind carries its proxy's password.
    return replace(
        outcome,
        error=scrub(outcome.error, job.proxy_url),
        reason=scrub(outcome.reason, job.proxy_url),
    )


def bounded_result(kind: str, outcome: Outcome, max_bytes: int) -> Outcome:
    """A completed outcome whose result is over ``max_bytes`` (its JSON) fails, not retried:
    running it again returns as much."""
    if outcome.status != "completed" or outcome.result is None:
        return outcome
    size = len(json.dumps(outcome.result).encode())
    if size <= max_bytes:
        return outcome
    return Outcome.failed(
        f"ResultTooLarge: the result of action {kind!r} is {size} bytes, over"
        f" result_max_bytes ({max_bytes})",
        retryable=False,
    )


def _run_job(
    job: ClaimedJob,
    lease: DriverLease | None,
    driver_factory: DriverFactory | None,
    capture_failure: CaptureFailure | None,
    browser_defaults: BrowserOptions,
    host_starved: HostStarved,
) -> Outcome:
    if lease is None and driver_factory is not None:
        lease = leases_from(driver_factory)
    if job.proxy_pool is not None and job.proxy_url is None:
        # Never straight out from this host's own address: the producer leases it a proxy of
        # its pool next time (the one it had was removed meanwhile, or none was leased).
        return Outcome.released(f"released: no proxy of pool {job.proxy_pool!r} leased to it")
    try:
        action = get_action(job.kind)
        payload = job.payload
        if job.proxy_url is not None and isinstance(payload, dict):
            payload = with_leased_proxy(
                payload,
                job.proxy_url,
                needs_browser=action.needs_browser,
                takes_proxy="proxy" in action.params_model.model_fields,
                own_fields=action.params_model.model_fields,
            )
        params = action.validate(payload)
        isolation = action.isolation_of(payload)
        options = action.browser_options_of(payload)
        if action.needs_browser:
            options = options.over(browser_defaults)
            isolation = with_options(isolation, not options.empty)
    except UnknownAction as exc:
        return Outcome.failed(f"UnknownAction: {exc}", retryable=False)
    except SubmitError as exc:
        return Outcome.failed(f"invalid payload for {job.kind!r}: {exc}", retryable=False)
    except ValueError as exc:  # the job's options and the host's do not fit together
        return Outcome.failed(f"invalid browser options for {job.kind!r}: {exc}", retryable=False)

    if not action.needs_browser:
        # A sticky session's jobs share its cookie jar and user agent (common.http.session_jar).
        stored = job.session
        session = None if stored is None else HttpSession.from_stored(*stored_jar(stored))
        try:
            with in_session(session) if session else contextlib.nullcontext():
                returned = action.func(params)
        except StackError as exc:
            return Outcome.released(f"released: {exc}", exc)
        except BaseException as exc:  # a worker thread must survive anything an action raises
            return _raised(job, exc, traceback.format_exc(), None)
        done = _checked_result(job.kind, returned, _identity(job, action), job.proxy_url)
        if session is not None and done.status == "completed":
            return replace(done, session_kept=session.stored())
        return done

    if lease is None:
        return Outcome.failed(
            f"action {job.kind!r} needs a browser, but this consumer has no browser stack"
            " (no driver factory configured)",
            retryable=False,
        )
    return _run_browser_job(
        job, action, params, lease, isolation, options, capture_failure, host_starved
    )


def _run_browser_job(
    job: ClaimedJob,
    action: Action,
    params: Any,
    lease: DriverLease,
    isolation: Isolation,
    options: BrowserOptions,
    capture_failure: CaptureFailure | None,
    host_starved: HostStarved,
) -> Outcome:
    with ExitStack() as held:
        try:
            driver = held.enter_context(tracing.entering(lease(isolation), LEASE, isolation))
        except BaseException as exc:  # no session is the host's fault, not the job's
            return Outcome.released(
                f"released: no browser session: {type(exc).__name__}: {exc}", exc
            )
        try:
            held.enter_context(job_browser(driver, options))
        except BaseException as exc:
            with contextlib.suppress(Exception):
                held.close()
            if isinstance(exc, StackError):
                return Outcome.released(f"released: {exc}", exc)
            # An option the browser refused: it refuses it the same way next time.
            return Outcome.failed(traceback.format_exc(), retryable=False)
        began, oom_kills = time.monotonic(), renderer_deaths.oom_kill_count()
        try:
            returned = action.func(driver, params)
        except StackError as exc:
            on_page = not isinstance(exc, selenium_actions.GridUnreachable)
            return Outcome.released(f"released: {exc}", exc, on_page=on_page)
        except BaseException as exc:
            if renderer_deaths.is_renderer_crash(exc) and (
                killed := renderer_deaths.renderer_killed(driver, began, oom_kills)
            ):
                # Not the page: it would load fine on a renderer nobody kills.
                return Outcome.released(
                    f"released: {renderer_deaths.killed_line(exc, killed)}", exc
                )
            if _late_for_the_host(exc) and (why := host_starved()):
                # A page that did not load in time while the host was starved: the next page
                # would time out there too. The host's fault, not the page's.
                return Outcome.released(f"released: {type(exc).__name__}: {exc}; {why}", exc)
            # Captured while the job's context is still open: its page is what failed (or
            # what blocked us: the evidence an operator wants).
            error = traceback.format_exc()
            artifacts = _capture(capture_failure, driver, job, error)
            return _raised(job, exc, error, artifacts)
        finally:
            with contextlib.suppress(Exception):
                held.close()  # the lease's own cleanup must never turn into the job's error
    return _checked_result(job.kind, returned, _identity(job, action), job.proxy_url)


def _raised(
    job: ClaimedJob, exc: BaseException, error: str, artifacts: dict[str, Any] | None
) -> Outcome:
    """How an attempt whose action raised ended; for one through a leased proxy, a refusal of
    its exit address is the proxy's block (back to pending, another proxy next time) and an
    unreachable proxy is the proxy's error (consumer.proxy_use)."""
    if job.proxy_id is not None:
        verdict = proxy_verdict(exc, job.proxy_block_statuses)
        if verdict == "blocked":
            return Outcome.blocked(f"proxy refused: {first_line(exc)}", error, artifacts)
        if verdict == "error":
            return replace(Outcome.raised(exc, error, artifacts), proxy_error=True)
    return Outcome.raised(exc, error, artifacts)


def _late_for_the_host(exc: BaseException) -> bool:
    """A page that did not load in time, or the stack answering too late: what a starved host
    causes. A wait the action itself chose (a selector that never appeared within the job's
    wait_timeout_s, raised as an ActionError over Selenium's TimeoutException) is the page's
    answer, whatever the load."""
    if isinstance(exc, selenium_actions.PageLoadTimeout):
        return True
    return not isinstance(exc, selenium_actions.ActionError) and timed_out(exc)


def _identity(job: ClaimedJob, action: Action) -> dict[str, Any]:
    """What the job's children inherit: the pool it asked for (not a tier it escalated to)
    and its sticky session, as payload keys."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    try:
        pool = action.proxy_pool_of(payload)
    except SubmitError:
        return {}
    return {PROXY_POOL_KEY: pool, SESSION_KEY: payload.get(SESSION_KEY)} if pool else {}


def _checked_result(
    kind: str, returned: Any, inherited: dict[str, Any], leased_proxy: str | None = None
) -> Outcome:
    """A result the database can store, or a failure saying why not (a bug in the action:
    running it again returns the same thing, so it is not retried). A ``Spawned`` carries
    follow-up jobs: every entry is checked here, and one bad entry fails the attempt."""
    spawn: tuple[Child, ...] = ()
    if isinstance(returned, Spawned):
        try:
            spawn = validate_spawn(returned.spawn, inherited, leased_proxy)
            allowed = {kind, *get_action(kind).spawns}
            other = sorted({c.kind for c in spawn} - allowed)
            if other:
                # The database would drop them (migration 0031): say so instead.
                raise SpawnError(
                    f"spawns kind {other[0]!r}, which it does not declare"
                    f" (register({kind!r}, spawns=[...]))"
                )
            json.dumps([child.as_json() for child in spawn])
        except SpawnError as exc:
            return Outcome.failed(f"SpawnError: action {kind!r}: {exc}", retryable=False)
        except (TypeError, ValueError) as exc:
            return Outcome.failed(
                f"SpawnError: action {kind!r}: a spawn payload is not JSON-serialisable: {exc}",
                retryable=False,
            )
        returned = returned.result
    if not isinstance(returned, dict):
        return Outcome.failed(
            f"action {kind!r} returned {type(returned).__name__}, not a dict", retryable=False
        )
    try:
        json.dumps(returned)
    except (TypeError, ValueError) as exc:
        return Outcome.failed(
            f"result of action {kind!r} is not JSON-serialisable: {exc}", retryable=False
        )
    return Outcome.completed(returned, spawn)


@tracing.traced("scrapefleet.browser.artifacts")
def _capture(
    capture_failure: CaptureFailure | None, driver: Any, job: ClaimedJob, error: str
) -> dict[str, Any] | None:
    if capture_failure is None:
        return None
    try:
        return capture_failure(driver, job.id, job.attempt, error)
    except Exception as exc:  # artifacts are a bonus; never let them hide the failure
        return {"notes": [f"artifacts not captured: {type(exc).__name__}: {exc}"]}
