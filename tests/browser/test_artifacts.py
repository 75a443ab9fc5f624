"""Failure artifacts: screenshot, HTML and traceback, and what happens with a dead browser."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scrapefleet.consumer.browser.actions.artifacts import capture_failure, prune_artifacts
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack, StackWebDriver
from tests.browser.site import LocalSite

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

TRACEBACK = "Traceback (most recent call last):\n  ...\nSelectorNotFound: '#never'\n"


def test_capture_writes_full_page_png_html_and_traceback(
    driver: StackWebDriver, site: LocalSite, tmp_path: Path
) -> None:
    driver.get(site.url("/long"))
    result = capture_failure(driver, tmp_path, job_id=17, attempt=2, traceback_text=TRACEBACK)
    assert result["notes"] == []
    assert result["screenshot"] == str(tmp_path / "17" / "attempt-2.png")
    png = Path(result["screenshot"]).read_bytes()
    assert png.startswith(b"\x89PNG")
    assert int.from_bytes(png[20:24], "big") > 4000  # the whole page, not the viewport
    assert 'id="bottom"' in Path(result["html"]).read_text()
    assert Path(result["traceback"]).read_text() == TRACEBACK


def test_capture_with_a_dead_browser_keeps_the_traceback_and_notes_the_rest(
    stack: BrowserStack, tmp_path: Path
) -> None:
    dead = stack.new_driver()
    dead.quit()
    started = time.monotonic()
    result = capture_failure(dead, tmp_path, job_id=5, attempt=1, traceback_text=TRACEBACK)
    assert time.monotonic() - started < 20
    assert Path(result["traceback"]).read_text() == TRACEBACK
    assert result["screenshot"] is None and result["html"] is None
    assert len(result["notes"]) == 2
    assert any(note.startswith("screenshot not captured") for note in result["notes"])


def test_capture_without_a_session(tmp_path: Path) -> None:
    result = capture_failure(None, tmp_path, job_id=6, attempt=3, traceback_text=TRACEBACK)
    assert Path(result["traceback"]).name == "attempt-3.txt"
    assert result["screenshot"] is None and len(result["notes"]) == 2


def test_prune_removes_only_jobs_older_than_retention(tmp_path: Path) -> None:
    now = datetime(2030, 1, 31, tzinfo=UTC)
    for job_id, age_days in ((1, 30), (2, 3)):
        folder = tmp_path / str(job_id)
        folder.mkdir()
        stamp = (now - timedelta(days=age_days)).timestamp()
        for name in ("attempt-1.txt", "attempt-1.png"):
            (folder / name).write_text("x")
            os.utime(folder / name, (stamp, stamp))
    (tmp_path / "screenshots").mkdir()  # not a job folder: left alone
    assert prune_artifacts(tmp_path, older_than_days=14, now=now) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2", "screenshots"]


def test_a_page_that_grows_its_dom_saves_its_html_cut_at_the_cap_and_says_so(
    driver: StackWebDriver, site: LocalSite, tmp_path: Path
) -> None:
    # A small page whose script writes 3 MB into its own DOM: saved whole, every attempt of
    # every job of the site would write that much to the host's disk.
    driver.get(site.url("/plain"))
    driver.execute_script(
        "const p = document.createElement('pre'); p.hidden = true;"
        "p.textContent = 'é'.repeat(1500000); document.body.appendChild(p);"
    )
    cap = 100_000
    result = capture_failure(
        driver, tmp_path, job_id=8, attempt=1, traceback_text=TRACEBACK, html_max_bytes=cap
    )
    assert result["html"], result["notes"]
    saved = Path(result["html"]).read_bytes()
    assert cap - 4 <= len(saved) <= cap
    saved.decode()  # cut on a character boundary
    assert saved.lstrip().lower().startswith(b"<html") or b"<title" in saved[:500]
    (note,) = result["notes"]
    assert note.startswith(f"html truncated to {len(saved):,} of ") and "bytes" in note
