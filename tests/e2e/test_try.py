"""`scrapefleet try`: one job of an action run here, with no database, producer or consumer;
browser actions in a local headless Chromium, their page and requests saved."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scrapefleet.common.settings import Settings
from tests.browser.recording_proxy import RecordingProxy
from tests.browser.site import LocalSite
from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

TEAM_MODULE = """
import time
from pydantic import BaseModel
from scrapefleet.common.api import Permanent, register

class ItemParams(BaseModel):
    url: str

@register("team_missing", ItemParams)
def missing(params):
    raise Permanent(f"no product at {params.url}")

@register("team_slow", timeout_s=0.5)
def slow(params):
    time.sleep(30)
    return {}

@register("team_price", ItemParams, needs_browser=True)
def price(driver, params):
    driver.get(params.url)
    if "Widget" not in driver.title:
        raise Permanent(f"not a product page: {driver.title!r}")
    return {"price": driver.find_element("css selector", ".price").text}
"""

defaults = Settings()
BROWSER_MISSING = [
    str(path)
    for path in (defaults.chromium_binary, defaults.chromedriver_binary)
    if not Path(path).exists()
]
needs_chromium = pytest.mark.skipif(
    bool(BROWSER_MISSING), reason=f"no local browser: missing {', '.join(BROWSER_MISSING)}"
)


@pytest.fixture
def team_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    (tmp_path / "team_scrapers.py").write_text(TEAM_MODULE)
    # A failed try saves into ./scrapefleet-try by default: here, never the checkout.
    monkeypatch.chdir(tmp_path)
    # No database anywhere: try must not need one.
    return {"PYTHONPATH": str(tmp_path), "SCRAPEFLEET_ACTIONS": "team_scrapers"}


def _try(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    done = run_cli(["try", *args], None, **env)
    return done.returncode, done.stdout, done.stderr


def test_a_completed_job_prints_its_result(team_env: dict[str, str]) -> None:
    code, out, err = _try(["noop", '{"sleep_s": 0}'], team_env)
    assert code == 0, err
    assert json.loads(out[: out.rindex("}") + 1]) == {"status": "completed", "result": {"ok": True}}
    assert out.splitlines()[-1].startswith("noop completed in ")


def test_a_job_file_is_tried_as_submit_reads_it(team_env: dict[str, str], tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"kind": "noop", "payload": {"sleep_s": 0}}, indent=2))
    code, _out, err = _try([str(job)], team_env)
    assert code == 0, err
    two = tmp_path / "two.jsonl"
    two.write_text('{"kind": "noop"}\n{"kind": "noop"}\n')
    code, _out, err = _try([str(two)], team_env)
    assert code == 2
    assert err == f"error: {two}: holds 2 jobs: try runs one\n"


def test_a_failing_action_exits_1_with_one_line_naming_why(team_env: dict[str, str]) -> None:
    code, out, err = _try(["team_missing", '{"url": "http://127.0.0.1:9/x"}'], team_env)
    assert code == 1
    assert json.loads(out[: out.rindex("}") + 1])["status"] == "failed"
    assert err == (
        "error: team_missing failed (permanent):"
        " scrapefleet.common.actions.error_classes.Permanent: no product at http://127.0.0.1:9/x"
        + err[err.index(" (", 60) :]
    )
    assert err.count("\n") == 1


def test_a_failed_plain_job_saves_its_traceback_in_job_txt(
    team_env: dict[str, str], tmp_path: Path
) -> None:
    """The docs say the traceback is in job.txt: a job without a browser too."""
    out = tmp_path / "out"
    code, stdout, _err = _try(
        ["team_missing", '{"url": "http://127.0.0.1:9/x"}', "--out", str(out)], team_env
    )
    assert code == 1
    saved = out / "job.txt"
    assert f"traceback: {saved}" in stdout.splitlines()
    text = saved.read_text()
    assert text.startswith("Traceback (most recent call last):")
    assert "Permanent: no product at http://127.0.0.1:9/x" in text


def test_an_action_past_its_own_timeout_fails_as_on_a_host(team_env: dict[str, str]) -> None:
    code, _out, err = _try(["team_slow"], team_env)
    assert code == 1
    assert "team_slow failed (transient): TimeoutError: job exceeded its time limit (0.5 s)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no_such_kind"], "error: unknown job kind 'no_such_kind' (known: "),
        (["team_missing", "{}"], "error: payload.url: Field required"),
        (["team_missing", "{nope"], "error: payload: not JSON: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    team_env: dict[str, str], args: list[str], message: str
) -> None:
    code, out, err = _try(args, team_env)
    assert (code, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_a_module_that_does_not_import_is_named(tmp_path: Path) -> None:
    (tmp_path / "team_broken.py").write_text("import no_such_dependency\n")
    env = {"PYTHONPATH": str(tmp_path), "SCRAPEFLEET_ACTIONS": "team_broken"}
    code, _out, err = _try(["noop"], env)
    assert code == 2
    assert err == (
        "error: invalid setting actions: cannot import 'team_broken': ModuleNotFoundError:"
        " No module named 'no_such_dependency'\n"
    )


def _try_on_site(
    kind: str, path: str, payload: dict[str, object], out_dir: Path, env: dict[str, str]
) -> tuple[int, str, str, LocalSite]:
    """``try KIND`` on the test site's ``path`` (the payload's url), saving into ``out_dir``."""
    with LocalSite() as site:
        full = json.dumps({"url": site.url(path), **payload})
        code, out, err = _try([kind, full, "--out", str(out_dir)], env)
    return code, out, err, site


@needs_chromium
def test_a_browser_job_saves_its_page_and_requests(
    team_env: dict[str, str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "tried"
    code, out, err, site = _try_on_site(
        "fetch_page", "/item", {"fields": {"p": {"css": ".price"}}}, out_dir, team_env
    )
    assert code == 0, err
    shown = json.loads(out[: out.rindex("}") + 1])
    assert shown["result"]["title"] == "Widget 42" and shown["result"]["fields"] == {"p": "9.99"}
    parts = ("screenshot: ", "html: ", "network: ")
    saved = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith(parts))
    assert saved == {
        "screenshot": str(out_dir / "job.png"),
        "html": str(out_dir / "job.html"),
        "network": str(out_dir / "job.network.json"),
    }
    assert (out_dir / "job.png").read_bytes().startswith(b"\x89PNG")
    assert "Widget" in (out_dir / "job.html").read_text()
    requests = json.loads((out_dir / "job.network.json").read_text())["requests"]
    assert [r["status"] for r in requests if r["url"] == site.url("/item")] == [200]


@needs_chromium
def test_a_failed_browser_job_keeps_its_page_and_traceback(
    team_env: dict[str, str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "tried"
    code, out, err, _site = _try_on_site("team_price", "/plain", {}, out_dir, team_env)
    assert code == 1
    assert "team_price failed (permanent): " in err and "not a product page: 'Plain'" in err
    assert err.count("\n") == 1
    assert f"traceback: {out_dir / 'job.txt'}" in out
    assert "not a product page" in (out_dir / "job.txt").read_text()
    assert (out_dir / "job.png").read_bytes().startswith(b"\x89PNG")
    assert "nothing awaited here" in (out_dir / "job.html").read_text()


@needs_chromium
def test_a_job_through_a_proxy_has_its_requests_in_the_saved_log(
    team_env: dict[str, str], tmp_path: Path
) -> None:
    """A job with a proxy runs in a user context of its own: its requests are logged too."""
    out_dir = tmp_path / "tried"
    with RecordingProxy() as proxy, LocalSite() as site:
        url = f"http://shop.test:{urlsplit(site.base_url).port}/item"
        payload = json.dumps({"url": url, "browser": {"proxy": proxy.url()}})
        code, _out, err = _try(["fetch_page", payload, "--out", str(out_dir)], team_env)
        assert code == 0, err
        assert proxy.requests_to("/item")  # it went through the proxy
    requests = json.loads((out_dir / "job.network.json").read_text())["requests"]
    assert [r["status"] for r in requests if r["url"] == url] == [200]
