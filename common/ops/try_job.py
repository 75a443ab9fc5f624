"""Run one job of an action on this machine, with no database, producer or consumer: what
`scrapefleet try` does (as `scrapy parse URL` does for a spider).

The job runs through the consumer's own runner (consumer.runner.run_job: the same validation,
browser options, block detection and error classes as on a host), within its action's time
limit. A browser action gets a headless Chromium of its own (consumer.browser.stack.headless),
started for this job and quit after it; whatever the job ended with, its page's screenshot and HTML
and every request the page made are saved in the output folder, with the traceback of a
failure beside them.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import ClaimedJob, NewJob
from scrapefleet.consumer.browser.actions.artifacts import capture_page
from scrapefleet.consumer.browser.actions.block_detection import BlockRules
from scrapefleet.consumer.browser.actions.job_setup import host_defaults
from scrapefleet.consumer.browser.actions.network_log import recording
from scrapefleet.consumer.browser.stack.headless import start_local_chrome
from scrapefleet.consumer.runner import DriverLease, Outcome, run_job

TRY_JOB_ID = 0  # no row anywhere: the job exists only in this process
ARTIFACT_STEM = "job"  # <out>/job.png, job.html, job.network.json, job.txt


@dataclass
class TryReport:
    kind: str
    outcome: Outcome
    seconds: float
    artifacts: dict[str, str] = field(default_factory=dict)  # part -> path
    notes: list[str] = field(default_factory=list)  # why a part is missing


def try_job(job: NewJob, settings: Settings, out_dir: Path) -> TryReport:
    """Run ``job`` (already validated) here; StackError when no browser can be started."""
    action = get_action(job.kind)
    claimed = ClaimedJob(
        TRY_JOB_ID,
        job.kind,
        job.payload,
        attempt=1,
        max_attempts=1,
        lock_key=None,
        needs_browser=action.needs_browser,
    )
    limit_s = action.time_limit_s(settings.job_timeout_s)
    started = time.monotonic()
    if not action.needs_browser:
        outcome = _within(limit_s, lambda: run_job(claimed), on_timeout=_nothing)
        report = TryReport(job.kind, outcome, time.monotonic() - started)
        _save_traceback(report, out_dir)
        return report
    report = TryReport(job.kind, Outcome.completed({}), 0.0)
    with tempfile.TemporaryDirectory(prefix="scrapefleet-try-") as profile:
        driver = start_local_chrome(settings, Path(profile))
        try:
            lease = _saving_lease(driver, out_dir, report, settings.artifact_html_max_bytes)
            report.outcome = _within(
                limit_s,
                lambda: run_job(
                    claimed,
                    lease=lease,
                    browser_defaults=host_defaults(settings),
                    block_rules=BlockRules.from_settings(settings),
                    artifacts_dir=settings.artifacts_dir,
                ),
                on_timeout=driver.quit,  # its calls fail, so its thread returns
            )
        finally:
            with contextlib.suppress(Exception):
                driver.quit()
    report.seconds = time.monotonic() - started
    _save_traceback(report, out_dir)
    return report


def _save_traceback(report: TryReport, out_dir: Path) -> None:
    """A failure's traceback in <out>/job.txt, for every action (a plain one has nothing else
    to save); a folder that cannot be written is said in a note, not raised over the outcome."""
    if not (report.outcome.error and report.outcome.status == "failed"):
        return
    path = out_dir / f"{ARTIFACT_STEM}.txt"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(report.outcome.error)
    except OSError as exc:
        report.notes.append(f"traceback not saved: {exc}")
        return
    report.artifacts["traceback"] = str(path)


def _nothing() -> None:
    """A plain job's thread cannot be ended: it is left to finish while the process exits."""


def _saving_lease(
    driver: Any, out_dir: Path, report: TryReport, html_max_bytes: int
) -> DriverLease:
    """The runner's lease of our one driver: every request of the job's page is logged, and
    the page is saved when the job lets go of it (after the action, failed or not)."""

    @contextlib.contextmanager
    def lease(_isolation: Isolation) -> Iterator[Any]:
        # Every context of the session: a job with a proxy runs in a context of its own.
        with recording(driver, None) as network:
            try:
                yield driver
            finally:
                saved = capture_page(
                    driver, out_dir, ARTIFACT_STEM, None, network, html_max_bytes=html_max_bytes
                )
                report.notes.extend(saved.pop("notes"))
                report.artifacts.update({k: v for k, v in saved.items() if v is not None})

    return lease


def _within(limit_s: float, run: Callable[[], Outcome], on_timeout: Callable[[], None]) -> Outcome:
    """``run()``'s outcome, or a timeout's as a consumer records it when ``limit_s`` passes
    first (the job's thread is left to end: nothing can interrupt an action)."""
    box: list[Outcome] = []
    worker = threading.Thread(target=lambda: box.append(run()), name="try-job", daemon=True)
    worker.start()
    worker.join(limit_s)
    if box:
        return box[0]
    on_timeout()
    return Outcome.failed(f"TimeoutError: job exceeded its time limit ({limit_s:g} s)")
