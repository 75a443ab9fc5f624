"""scrapefleet's public Python API: everything a scraper's author or a submitting program
imports, from the top-level package ``scrapefleet`` (which loads this module when a name of it is
first used) or from here (the admin CLI uses it too; docs/scrapers.md walks through it).

Writing actions:

    from pydantic import BaseModel
    from scrapefleet import Permanent, Spawned, register

    class PriceParams(BaseModel):
        url: str

    @register("prices", PriceParams, needs_browser=True, timeout_s=120, max_attempts=5)
    def prices(driver, params): ...

Submitting and reading:

    from scrapefleet import Client, submit
    job_id = submit("http_get", {"url": "https://example.org/"})  # the settings' database
    with Client("postgresql://...") as client:
        job_id = client.submit("http_get", {"url": "https://example.org/"})
        print(client.wait([job_id], timeout_s=60))

Names outside ``__all__`` (and the other modules of scrapefleet) may change between versions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from scrapefleet.common import store, tracing, tracing_jobs
from scrapefleet.common.actions.error_classes import Blocked, Permanent, RateLimited
from scrapefleet.common.actions.registry import FreeParams, Lightness, load_user_actions, register
from scrapefleet.common.actions.spawn import Child, Spawned
from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.browser.profile_names import payload_profile_pool
from scrapefleet.common.db.engines import make_engine, transaction, wrapped_errors
from scrapefleet.common.errors import (
    JobFailed,
    ScrapefleetError,
    SettingsError,
    SubmitError,
    UnknownAction,
)
from scrapefleet.common.jobs.submit_file import validate_job
from scrapefleet.common.reads import queries
from scrapefleet.common.reads.results import ResultFilter, iter_results, results_of
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.store import InsertResult, NewJob
from scrapefleet.common.store.statuses import FINISHED

# FINISHED: the statuses wait() ends on (the tools use it too).
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


def refuse_unpinnable(jobs: Sequence[NewJob]) -> None:
    """A pinned job skips the planner, so it must not need what only the planner guarantees:
    one job per lock key, one job per browser profile at a time on the profile's own host, a
    proxy of its pool leased to each attempt."""
    for number, job in enumerate(jobs, 1):
        if job.lock_key is not None:
            reason = f"lock_key {job.lock_key!r}"
        elif payload_profile_pool(job.payload):
            reason = "a browser profile"
        elif job.proxy_pool is not None:
            reason = f"a proxy pool ({job.proxy_pool!r}: the producer leases its proxies)"
        else:
            continue
        raise SubmitError(
            f"job {number}: a job pinned to a host cannot have {reason} (the producer's planner"
            " enforces those); submit it without --host"
        )


class Client:
    def __init__(self, database_url: str | None = None, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        url = database_url or self.settings.database_url
        if not url:
            raise SettingsError("database_url is not set (SCRAPEFLEET_DATABASE_URL)")
        load_user_actions(self.settings.actions)
        tracing.start_for_client("scrapefleet-client", keep_query=self.settings.trace_full_urls)
        self.engine = make_engine(
            url, application_name="scrapefleet-client", settings=self.settings
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def submit(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        not_before: datetime | None = None,
        dedupe_key: str | None = None,
        lock_key: str | None = None,
        callback_url: str | None = None,
        rate_key: str | None = None,
        traceparent: str | None = None,
    ) -> int | None:
        """Submit one job; returns its id, or None when its dedupe key is already in use.
        A field left None takes its action's default (``register(...)``), else the settings'.
        ``callback_url`` (http or https) gets a signed POST when the job completes or fails.
        ``traceparent`` (W3C): the job's trace's parent; by default the caller's current span
        when the program traces (OpenTelemetry), else a trace of its own."""
        job = validate_job(
            {
                "kind": kind,
                "payload": payload or {},
                "priority": priority,
                "max_attempts": max_attempts,
                "not_before": not_before,
                "dedupe_key": dedupe_key,
                "lock_key": lock_key,
                "callback_url": callback_url,
                "rate_key": rate_key,
                "traceparent": traceparent,
            }
        )
        ids = self.submit_many([job]).ids
        return ids[0] if ids else None

    def submit_many(
        self,
        jobs: Sequence[NewJob],
        progress: Callable[[int], None] | None = None,
        *,
        host: str | None = None,
    ) -> InsertResult:
        """Insert already-validated jobs in one transaction: all of them or none. ``host``:
        queued on that host at once, for its consumer only (NotFound if there is none)."""
        if host is not None:
            refuse_unpinnable(jobs)
        with tracing_jobs.submitting(jobs) as jobs, transaction(self.engine) as conn:
            result = store.insert_jobs(
                conn, jobs, default_max_attempts=self.settings.max_attempts, progress=progress
            )
            if host is not None:
                store.pin_jobs_to_host(conn, result.ids, host)
            return result

    def job(self, job_id: int) -> dict[str, Any]:
        with wrapped_errors(), self.engine.connect() as conn:
            return queries.job(conn, job_id)

    def status_counts(self) -> dict[str, int]:
        with wrapped_errors(), self.engine.connect() as conn:
            return queries.status_counts(conn)

    def results(self, which: ResultFilter | None = None) -> Iterator[dict[str, Any]]:
        """Every job matching ``which`` (all of them by default), archived ones too, oldest
        first, streamed: id, kind, status, host, attempts, times, payload, result, last_error."""
        with wrapped_errors():
            yield from iter_results(self.engine, which or ResultFilter())

    def map(
        self,
        kind: str,
        payloads: Iterable[dict[str, Any]],
        timeout_s: float,
        *,
        poll_s: float = 0.2,
    ) -> Iterator[dict[str, Any]]:
        """Submit one job per payload (one transaction) and yield their results in submit
        order, each as soon as it and those before it have finished, like a pool's map.
        A job that failed or was cancelled raises JobFailed when its turn comes; TimeoutError
        when ``timeout_s`` passes first."""
        jobs = [validate_job({"kind": kind, "payload": p}) for p in payloads]
        ids = self.submit_many(jobs).ids
        deadline = time.monotonic() + timeout_s
        done: dict[int, dict[str, Any]] = {}
        for job_id in ids:
            while job_id not in done:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} of {kind!r} unfinished after {timeout_s} s")
                waiting = [i for i in ids if i not in done]
                with wrapped_errors(), self.engine.connect() as conn:
                    done.update(results_of(conn, waiting))
                if job_id not in done:
                    time.sleep(poll_s)
            row = done.pop(job_id)
            if row["status"] != "completed":
                raise JobFailed(job_id, row["status"], row["last_error"])
            yield row["result"]

    def wait(self, job_ids: Sequence[int], timeout_s: float, poll_s: float = 0.2) -> dict[int, str]:
        """Wait until every job has finished or the timeout passes; returns their statuses."""
        deadline = time.monotonic() + timeout_s
        while True:
            with wrapped_errors(), self.engine.connect() as conn:
                statuses = queries.job_statuses(conn, job_ids)
            if all(s in FINISHED for s in statuses.values()) or time.monotonic() > deadline:
                return statuses
            time.sleep(poll_s)


def submit(
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    database_url: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    not_before: datetime | None = None,
    dedupe_key: str | None = None,
    lock_key: str | None = None,
    callback_url: str | None = None,
    rate_key: str | None = None,
) -> int | None:
    """Submit one job to the settings' database (``database_url``, else
    SCRAPEFLEET_DATABASE_URL or the config file's): Client.submit for a script that submits
    once. Its id, or None when its dedupe key is already in use."""
    with Client(database_url) as client:
        return client.submit(
            kind,
            payload,
            priority=priority,
            max_attempts=max_attempts,
            not_before=not_before,
            dedupe_key=dedupe_key,
            lock_key=lock_key,
            callback_url=callback_url,
            rate_key=rate_key,
        )
