"""A page for every object on the dashboard, against real PostgreSQL: crawls, rate keys,
browser profiles and failure groups, each listed and linked from every page's header, the
lists keyset-paged (a full page links the next, which starts after its last row)."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.constants import DASHBOARD_PAGE_ROWS
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob

pytestmark = pytest.mark.timeout(60)


def _get(engine: Engine, database_url: str, path: str) -> str:
    client = create_app(load_settings(None, database_url=database_url), engine).test_client()
    answer = client.get(path)
    assert answer.status_code == 200, answer.get_data(as_text=True)[:500]
    return answer.get_data(as_text=True)


def test_every_object_page_is_linked_from_the_header(engine: Engine, database_url: str) -> None:
    page = _get(engine, database_url, "/")
    for path in ("/failures", "/crawls", "/rate-limits", "/profiles", "/identities"):
        assert f'href="{path}"' in page, path


def test_crawls_page_lists_each_crawl_and_links_its_pages(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        ids = [
            store.start_crawl(
                conn, kind="crawl", payload={"url": f"http://127.0.0.1:9/{n}"}, max_depth=2,
                max_jobs=100, seed=f"http://127.0.0.1:9/{n}",
            )
            for n in range(3)
        ]  # fmt: skip
    page = _get(engine, database_url, "/crawls")
    shown = [int(n) for n in re.findall(r'href="/jobs\?crawl=(\d+)"', page)]
    assert shown == sorted(ids, reverse=True)  # newest first
    assert "http://127.0.0.1:9/2" in page
    search = _get(engine, database_url, f"/jobs?crawl={ids[0]}")
    assert f'href="/jobs/{ids[0]}"' in search and f'href="/jobs/{ids[1]}"' not in search


def test_profiles_page_is_keyset_paged(engine: Engine, database_url: str) -> None:
    names = [f"acct-{n:03d}" for n in range(DASHBOARD_PAGE_ROWS + 5)]
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO profiles (name) SELECT unnest(CAST(:names AS text[]))"),
            {"names": names},
        )
    first = _get(engine, database_url, "/profiles")
    listed = re.findall(r"<td>(acct-\d{3})", first)
    assert listed == names[:DASHBOARD_PAGE_ROWS]
    [next_page] = re.findall(r'id="next-page" href="([^"]+)"', first)
    assert next_page == f"/profiles?after={names[DASHBOARD_PAGE_ROWS - 1]}"
    second = _get(engine, database_url, next_page)
    assert re.findall(r"<td>(acct-\d{3})", second) == names[DASHBOARD_PAGE_ROWS:]
    assert 'id="next-page"' not in second


def test_rate_keys_page_shows_the_keys_with_work(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        store.insert_jobs(
            conn,
            [NewJob("http_get", {"url": "http://shop.test/a"}, rate_key="shop.test")] * 2,
            default_max_attempts=3,
        )
    page = _get(engine, database_url, "/rate-limits")
    assert re.search(r"<td>shop\.test\s*</td>\s*<td>0\s*</td>\s*<td>0\s*</td>\s*<td>2", page)


def test_failures_page_groups_causes_with_an_example(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=6))
        ids = store.insert_jobs(conn, [NewJob("pages")] * 3, default_max_attempts=1).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
        for job, code in zip(store.claim_jobs(conn, "h1", 3).jobs, (404, 404, 500), strict=True):
            store.fail_attempt(
                conn,
                "h1",
                job.id,
                job.attempt,
                f"HTTP {code} from http://a/{job.id}",
                retry_at=None,
            )
    page = _get(engine, database_url, "/failures")
    rows = re.findall(
        r'<td class="num">(\d+)</td><td>pages</td>.*?<code>([^<]+)</code>', page, re.S
    )
    assert rows == [("2", "HTTP 404 from &lt;url&gt;"), ("1", "HTTP 500 from &lt;url&gt;")]
    assert re.search(r'href="/jobs/\d+"', page)


def test_a_rate_key_is_paused_and_resumed_from_its_page(engine: Engine, database_url: str) -> None:
    token = "dashboard-live-token-0123456789"
    settings = load_settings(None, database_url=database_url, dashboard_token=token)
    client = create_app(settings, engine).test_client()
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop", rate_key="shop.test")], default_max_attempts=3)
    bearer = {"Authorization": f"Bearer {token}"}
    form = {"scope": "rate_key", "name": "shop.test", "action": "pause", "reason": "asked"}
    assert client.post("/control/live", data=form, headers=bearer).status_code == 303
    page = client.get("/rate-limits").get_data(as_text=True)
    assert '<span class="paused">paused</span>' in page and 'value="resume"' in page
    with engine.connect() as conn:
        held = store.live_controls(conn).holds()
    assert held.keys == ("shop.test",)
    resumed = client.post("/control/live", data={**form, "action": "resume"}, headers=bearer)
    assert resumed.status_code == 303
    refused = client.post("/control/live", data=form)  # no token: refused, nothing written
    assert refused.status_code == 403
    with engine.connect() as conn:
        changes = conn.execute(
            sa.text("SELECT change, changed_by, reason FROM control_changes ORDER BY id")
        ).all()
    assert [(c.change, c.reason) for c in changes] == [("pause", "asked"), ("resume", "asked")]
    assert changes[0].changed_by.startswith("dashboard")
