"""What a job's requests leave behind: the document's response headers in fetch_page's result,
and every request of the page in a failed attempt's ``attempt-N.network.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapefleet.consumer.browser.sessions.session_pool import SessionPool
from tests.browser.evidence_site import PIXEL_TRACE, EvidenceSite, ray_of
from tests.browser.job_browser_helpers import evidence_site, job_pool, run  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def test_fetch_page_returns_the_documents_response_headers(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
) -> None:
    outcome = run(job_pool, "fetch_page", {"url": evidence_site.url("/page")})
    assert outcome.status == "completed", outcome.error
    assert outcome.result is not None
    headers = outcome.result["headers"]
    assert outcome.result["status"] == 200
    assert headers["cf-ray"] == ray_of("/page")
    assert headers["content-type"] == "text/html; charset=utf-8"


def test_a_failed_attempt_saves_every_request_of_its_page(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
    tmp_path: Path,
) -> None:
    payload = {"url": evidence_site.url("/page"), "wait_for": "#never", "wait_timeout_s": 0.3}
    outcome = run(job_pool, "fetch_page", payload, artifacts_dir=tmp_path)
    assert outcome.status == "failed" and "SelectorNotFound" in (outcome.error or "")
    assert outcome.artifacts is not None
    path = Path(outcome.artifacts["network"])
    assert path.name == "attempt-1.network.json" and path.parent.parent == tmp_path
    assert Path(outcome.artifacts["screenshot"]).parent == path.parent  # beside the others

    log = json.loads(path.read_text())
    assert log["dropped"] == 0
    port = evidence_site.port
    requests = {r["url"]: r for r in log["requests"]}
    page = requests[f"http://127.0.0.1:{port}/page"]
    assert page["document"] and page["status"] == 200 and page["method"] == "GET"
    assert page["headers"]["cf-ray"] == ray_of("/page")
    assert page["timings_ms"] and page["at_ms"]
    pixel = requests[f"http://127.0.0.1:{port}/pixel.png"]
    assert (pixel["status"], pixel["type"]) == (200, "image")
    assert pixel["headers"]["x-trace"] == PIXEL_TRACE
    assert requests[f"http://127.0.0.1:{port}/style.css"]["status"] == 200
    missing = requests[f"http://127.0.0.1:{port}/missing.js"]
    assert missing["status"] == 404 and missing["headers"]["cf-ray"] == ray_of("/missing.js")
    assert not missing["document"]


def test_a_blocked_request_is_logged_with_its_error(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
    tmp_path: Path,
) -> None:
    payload = {
        "url": evidence_site.url("/page"),
        "wait_for": "#never",
        "wait_timeout_s": 0.3,
        "browser": {"block": ["images"]},
    }
    outcome = run(job_pool, "fetch_page", payload, artifacts_dir=tmp_path)
    assert outcome.status == "failed" and outcome.artifacts is not None
    log = json.loads(Path(outcome.artifacts["network"]).read_text())
    pixel = next(r for r in log["requests"] if r["url"].endswith("/pixel.png"))
    assert pixel["status"] is None and pixel["error"]


@pytest.mark.parametrize(("isolation", "subscribes"), [("cleared", 1), ("context", 3)])
def test_a_cleared_slot_subscribes_once_and_each_log_holds_its_own_job(
    job_pool: SessionPool,  # noqa: F811
    evidence_site: EvidenceSite,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    isolation: str,
    subscribes: int,
) -> None:
    """The network log's subscription outlives a job whose user context does ("cleared": one
    subscribe for three jobs; "context": one per job), and still no job's log shows another
    job's requests."""
    from scrapefleet.consumer.browser.sessions import bidi as bidi_commands

    # A fresh slot first: the counting starts with the slot's subscribe.
    run(job_pool, "fetch_page", {"url": evidence_site.url("/page"), "isolation": "context"})
    calls: list[str] = []
    real = bidi_commands.command

    def counting(driver: object, method: str, params: dict[str, object]) -> dict[str, object]:
        calls.append(method)
        return real(driver, method, params)

    monkeypatch.setattr(bidi_commands, "command", counting)
    paths = []
    for n in range(3):
        payload = {
            "url": evidence_site.url(f"/page?job={n}"),
            "isolation": isolation,
            "wait_for": "#never",
            "wait_timeout_s": 0.3,
        }
        outcome = run(job_pool, "fetch_page", payload, artifacts_dir=tmp_path / str(n))
        assert outcome.status == "failed" and outcome.artifacts is not None, outcome.error
        paths.append(Path(outcome.artifacts["network"]))
    assert calls.count("session.subscribe") == subscribes
    for n, path in enumerate(paths):
        documents = [r["url"] for r in json.loads(path.read_text())["requests"] if r["document"]]
        assert documents == [evidence_site.url(f"/page?job={n}")]
