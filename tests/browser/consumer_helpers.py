"""A real Consumer with its own browser stack, run in a thread, fed through store.

The tests stand in for the producer: they queue jobs on the host with insert_jobs + assign_jobs,
and ``assign_due`` gives released or retried jobs back to the host, as the producer would while
the host is active. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import register
from scrapefleet.common.db.engines import make_engine
from scrapefleet.common.settings import Settings, load_settings
from scrapefleet.common.store import NewJob
from scrapefleet.consumer.browser.actions.selenium_actions import navigate
from scrapefleet.consumer.browser.stack.processes import is_gone
from scrapefleet.consumer.daemon import Consumer
from tests.browser.conftest import stack_settings

HOST = "b1"


class CrashParams(BaseModel):
    url: str


@register("test_crash_renderer", CrashParams, needs_browser=True)
def crash_renderer(driver: Any, params: CrashParams) -> dict[str, Any]:
    """A page that kills its renderer. A job's URL must be http(s), and no http page can
    navigate to chrome://crash, so the test action takes that step itself."""
    navigate(driver, params.url)
    navigate(driver, "chrome://crash")
    return {}


def consumer_settings(tmp_path: Path, database_url: str, **overrides: Any) -> Settings:
    boot_id = tmp_path / "boot_id"
    if not boot_id.exists():
        boot_id.write_text("boot-1\n")
    base = stack_settings(tmp_path / "artifacts").model_dump()
    values = {
        **{k: base[k] for k in base if k.endswith("_timeout_s") or k.startswith("screen_")},
        "grid_session_timeout_s": base["grid_session_timeout_s"],
        "database_url": database_url,
        "state_dir": tmp_path / "state",
        "artifacts_dir": tmp_path / "artifacts",
        "boot_id_file": boot_id,
        "consumer_poll_s": 0.2,
        "heartbeat_s": 0.5,
        "backoff_base_s": 0.1,
        "backoff_max_s": 0.5,
        "job_timeout_s": 120.0,  # a loaded 2-core machine can take many seconds per session
        "page_load_timeout_s": 20.0,
        **overrides,
    }
    return load_settings(None, **values)


def queue_jobs(engine: Engine, jobs: list[NewJob], host: str = HOST) -> list[int]:
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, jobs, default_max_attempts=1).ids
        store.assign_jobs(conn, [(i, host) for i in ids])
    return ids


def assign_due(engine: Engine, host: str = HOST) -> None:
    """The producer's part: due pending jobs to the host, while it is active."""
    with engine.begin() as conn:
        state = conn.execute(
            sa.text("SELECT state FROM hosts WHERE name = :h"), {"h": host}
        ).scalar()
        if state != "active":
            return
        due = store.lock_pending_jobs(conn, 100)
        store.assign_jobs(conn, [(p.id, host) for p in due])


def fetch(site_url: str, **extra: Any) -> NewJob:
    return NewJob("fetch_page", {"url": site_url, **extra}, max_attempts=1)


def rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def finished(engine: Engine, ids: list[int]) -> bool:
    done = scalar(
        engine,
        "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status IN ('completed', 'failed')",
        ids=ids,
    )
    return bool(done == len(ids))


def finished_unreleased(engine: Engine, ids: list[int]) -> bool:
    """``finished``, for a test that runs no producer: a job released (the host's fault) goes
    back to pending and would never come back, so a release fails the test at once, with its
    reason, instead of as a timeout."""
    released = rows(
        engine,
        "SELECT job_id, message FROM job_events WHERE job_id = ANY(:ids)"
        " AND from_status = 'processing' AND to_status = 'pending' ORDER BY id",
        ids=ids,
    )
    if released:
        reasons = "; ".join(f"job {r.job_id}: {r.message}" for r in released)
        raise AssertionError(f"{len(released)} job(s) released: {reasons}")
    return finished(engine, ids)


def host_events(engine: Engine, event: str, host: str = HOST) -> list[Any]:
    return rows(
        engine,
        "SELECT * FROM host_events WHERE host = :h AND event = :e ORDER BY id",
        h=host,
        e=event,
    )


@contextmanager
def consumer_thread(settings: Settings, database_url: str, host: str = HOST) -> Iterator[Consumer]:
    """A real Consumer (and so its own browser stack) in a thread, stopped at exit."""
    engine = make_engine(
        database_url, pool_size=3, application_name=f"browser-test-{uuid.uuid4().hex[:8]}"
    )
    consumer = Consumer(settings, engine, host)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="consumer-under-test", daemon=True)
    thread.start()
    try:
        yield consumer
    finally:
        consumer.request_stop("test over")
        thread.join(settings.job_timeout_s + settings.stack_stop_timeout_s + 15)
        engine.dispose()
    assert not thread.is_alive(), "consumer did not stop"
    assert not errors, errors
    if consumer.supervisor is not None:
        assert consumer.supervisor.stack.processes() == [], "browser processes left at exit"


class FirstStackChromium:
    """Samples the PIDs of the first stack's Chromium processes from a thread (psutil, by the
    stack's own marker) until the consumer begins its first restart or reboot, to check later
    that none of them outlived it."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.seen: dict[int, psutil.Process] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._done = threading.Event()

    def _run(self) -> None:
        while not self._done.wait(0.1):
            supervisor = self.consumer.supervisor
            if supervisor is None or not supervisor.running:
                continue
            if supervisor.maintenance_state is not None:
                return
            for proc in supervisor.stack.processes():
                try:
                    if "chrom" in proc.name():
                        self.seen.setdefault(proc.pid, proc)
                except psutil.Error:
                    continue

    def __enter__(self) -> FirstStackChromium:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)

    def survivors(self) -> list[psutil.Process]:
        return [p for p in self.seen.values() if not is_gone(p)]
