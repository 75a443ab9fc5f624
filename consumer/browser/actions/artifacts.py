"""What an operator reads at 2am about a failed attempt: screenshot, page HTML, traceback and
every request of the page (consumer.browser.actions.network_log).

Files are ``<artifacts_dir>/<job_id>/attempt-<n>.png|.html|.txt|.network.json``. Capturing
must never be the cause of a second error: the browser may be dead or hung when we get here, so
each part runs under a deadline and a part that cannot be had is written down in ``notes``
instead.
"""

from __future__ import annotations

import base64
import shutil
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from scrapefleet.common.constants import ARTIFACT_HTML_MAX_BYTES
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.masking import mask_text
from scrapefleet.consumer.browser.actions.network_log import NetworkLog, network_log_of

CAPTURE_PART_TIMEOUT_S = 15.0  # per part; a hung renderer must not hold the job's slot
FULL_PAGE_MAX_HEIGHT_PX = 16_384  # beyond this Chromium's capture fails or eats memory
HTML_MAX_BYTES = ARTIFACT_HTML_MAX_BYTES  # the artifact_html_max_bytes setting's default

T = TypeVar("T")


class _PartTimedOut(Exception):
    pass


def _with_deadline(func: Callable[[], T], timeout_s: float) -> T:
    """Run func in a daemon thread; give up waiting after timeout_s (the thread is left to
    finish on its own: Selenium calls cannot be interrupted)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, name="capture-part", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise _PartTimedOut(f"no answer within {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def full_page_png(driver: Any) -> bytes:
    """The whole page, not only the viewport, through DevTools when the driver offers it."""
    cdp = getattr(driver, "execute_cdp_cmd", None)
    if cdp is None:
        png: bytes = driver.get_screenshot_as_png()
        return png
    metrics = cdp("Page.getLayoutMetrics", {})
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    clip = {
        "x": 0,
        "y": 0,
        "width": max(int(size["width"]), 1),
        "height": min(max(int(size["height"]), 1), FULL_PAGE_MAX_HEIGHT_PX),
        "scale": 1,
    }
    shot = cdp(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": clip},
    )
    return base64.b64decode(shot["data"])


def capped_html(source: str, max_bytes: int) -> tuple[bytes, str | None]:
    """The page's HTML as saved: at most ``max_bytes`` (cut on a character boundary), and the
    note that says it was cut and from what size, or None when it was whole."""
    data = source.encode()
    if len(data) <= max_bytes:
        return data, None
    kept = data[:max_bytes].decode(errors="ignore").encode()
    return kept, f"html truncated to {len(kept):,} of {len(data):,} bytes (artifact_html_max_bytes)"


def capture_failure(
    driver: Any | None,
    artifacts_dir: Path,
    job_id: int,
    attempt: int,
    traceback_text: str,
    part_timeout_s: float = CAPTURE_PART_TIMEOUT_S,
    html_max_bytes: int = HTML_MAX_BYTES,
) -> dict[str, Any]:
    """Save what can be saved of a failed attempt under ``<artifacts_dir>/<job_id>/``; returns
    {"screenshot", "html", "traceback", "network": path | None, "notes": [why a part is
    missing]}. Never raises. ``network`` is None, without a note, for a session that logs no
    requests (one without BiDi)."""
    network = network_log_of(driver) if driver is not None else None
    folder = Path(artifacts_dir) / str(job_id)
    return capture_page(
        driver,
        folder,
        f"attempt-{attempt}",
        traceback_text,
        network,
        part_timeout_s,
        html_max_bytes,
    )


def capture_page(
    driver: Any | None,
    folder: Path,
    stem: str,
    traceback_text: str | None,
    network: NetworkLog | None,
    part_timeout_s: float = CAPTURE_PART_TIMEOUT_S,
    html_max_bytes: int = HTML_MAX_BYTES,
) -> dict[str, Any]:
    """``folder/<stem>.txt`` (the traceback, when given), ``.network.json``, ``.png`` and
    ``.html`` of the page ``driver`` shows now, as capture_failure says; the HTML cut at
    ``html_max_bytes``, with a note saying so. Never raises."""
    result: dict[str, Any] = {
        "screenshot": None,
        "html": None,
        "traceback": None,
        "network": None,
        "notes": [],
    }
    notes: list[str] = result["notes"]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        notes.append(f"artifacts directory {folder}: {first_line(exc, named=True)}")
        return result

    def save(key: str, suffix: str, produce: Callable[[], bytes]) -> None:
        path = folder / f"{stem}{suffix}"
        try:
            path.write_bytes(produce())
            result[key] = str(path)
        except Exception as exc:
            notes.append(f"{key} not captured: {first_line(exc, named=True)}")

    # The traceback first: it needs no browser and is the one part always worth having.
    if traceback_text is not None:
        # Served from /artifacts: a proxy URL's password in an exception's text stays out of it.
        save("traceback", ".txt", lambda: mask_text(traceback_text).encode())
    if network is not None:  # read from memory: needs no answer from the browser
        network.settle()
        save("network", ".network.json", lambda: network.as_json().encode())
    if driver is None:
        notes.append("screenshot not captured: no browser session")
        notes.append("html not captured: no browser session")
        return result

    def screenshot() -> bytes:
        return _with_deadline(lambda: full_page_png(driver), part_timeout_s)

    def html() -> bytes:
        source: str = _with_deadline(lambda: driver.page_source, part_timeout_s)
        data, cut = capped_html(source, html_max_bytes)
        if cut is not None:
            notes.append(cut)
        return data

    save("screenshot", ".png", screenshot)
    save("html", ".html", html)
    return result


def capture_into(
    artifacts_dir: Path, html_max_bytes: int = HTML_MAX_BYTES
) -> Callable[[Any, int, int, str], dict[str, Any]]:
    """capture_failure bound to one directory: the runner's ``capture_failure`` hook."""

    def capture(driver: Any, job_id: int, attempt: int, traceback_text: str) -> dict[str, Any]:
        return capture_failure(
            driver, artifacts_dir, job_id, attempt, traceback_text, html_max_bytes=html_max_bytes
        )

    return capture


def prune_artifacts(artifacts_dir: Path, older_than_days: float, now: datetime) -> int:
    """Delete job artifact folders whose newest file is older than the retention; returns
    how many folders went. ``now`` is timezone-aware; file times are compared in UTC."""
    cutoff = (now - timedelta(days=older_than_days)).timestamp()
    removed = 0
    try:
        folders = [p for p in Path(artifacts_dir).iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return 0
    for folder in folders:
        try:
            newest = max(
                (f.stat().st_mtime for f in folder.iterdir()), default=folder.stat().st_mtime
            )
        except OSError:
            continue
        if newest < cutoff:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
