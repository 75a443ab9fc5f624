"""Where a screenshot that names no folder goes: its consumer's artifacts_dir/screenshots, as
the runner passes it, never a folder the action reads from the environment it runs in."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.runner import run_job

# A 1x1 PNG: the action reads its size from the header.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


class _Page:
    """What the screenshot action asks of its driver, answered for one page."""

    title = "a page"
    current_url = "http://127.0.0.1:9/page"

    def get(self, url: str) -> None:
        self.current_url = url

    def execute_script(self, script: str, *args: Any) -> Any:
        return 200  # the main document's status

    def get_screenshot_as_png(self) -> bytes:
        return PNG


def _lease(_isolation: Any) -> contextlib.AbstractContextManager[Any]:
    @contextlib.contextmanager
    def leased() -> Iterator[Any]:
        yield _Page()

    return leased()


def _screenshot_job(**payload: Any) -> ClaimedJob:
    payload = {"url": "http://127.0.0.1:9/page", "full_page": False, **payload}
    return ClaimedJob(
        id=7, kind="screenshot", payload=payload, attempt=1, max_attempts=3, lock_key=None
    )


def test_it_goes_to_the_consumers_folder_not_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEFLEET_ARTIFACTS_DIR", str(tmp_path / "environment"))
    outcome = run_job(_screenshot_job(), lease=_lease, artifacts_dir=tmp_path / "consumer")
    assert outcome.status == "completed", outcome.error
    assert outcome.result is not None
    path = Path(outcome.result["path"])
    assert path.parent == tmp_path / "consumer" / "screenshots"
    assert path.read_bytes() == PNG
    assert not (tmp_path / "environment").exists()


def test_a_named_folder_wins(tmp_path: Path) -> None:
    job = _screenshot_job(output_dir=str(tmp_path / "mine"))
    outcome = run_job(job, lease=_lease, artifacts_dir=tmp_path / "consumer")
    assert outcome.status == "completed", outcome.error
    assert outcome.result is not None
    assert Path(outcome.result["path"]).parent == tmp_path / "mine"


def test_with_no_folder_at_all_it_fails_for_good_naming_output_dir(tmp_path: Path) -> None:
    outcome = run_job(_screenshot_job(), lease=_lease)
    assert outcome.status == "failed" and not outcome.retryable
    assert outcome.error is not None and "no output_dir" in outcome.error
