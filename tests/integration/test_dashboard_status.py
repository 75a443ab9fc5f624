"""The dashboard's machine-readable answers and the overview's progress line, against real
PostgreSQL: /api/status is `scrapefleet status --json`, /healthz says whether the database
answers, and the overview reloads itself without JavaScript when asked."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.timeout(60)


def _dashboard(engine: Engine, database_url: str) -> object:
    return create_app(load_settings(None, database_url=database_url), engine).test_client()


def test_api_status_is_the_clis_json(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        store.insert_jobs(conn, [NewJob("noop")] * 3, default_max_attempts=3)
    answer = _dashboard(engine, database_url).get("/api/status")  # type: ignore[attr-defined]
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    served = answer.get_json()
    printed = json.loads(run_cli(["status", "--json"], database_url).stdout)
    assert served["jobs"] == printed["jobs"] and served["jobs"]["pending"] == 3
    assert served["progress"]["remaining"] == printed["progress"]["remaining"] == 3
    assert set(served) == set(printed)


def test_healthz_says_whether_the_database_answers(engine: Engine, database_url: str) -> None:
    assert _dashboard(engine, database_url).get("/healthz").status_code == 200  # type: ignore[attr-defined]
    dead = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    down = create_app(load_settings(None, database_url=database_url), dead).test_client()
    answer = down.get("/healthz")
    assert answer.status_code == 503 and answer.get_data(as_text=True) == "database unreachable\n"


def test_the_overview_shows_progress_and_reloads_itself_when_asked(
    engine: Engine, database_url: str
) -> None:
    client = _dashboard(engine, database_url)
    page = client.get("/").get_data(as_text=True)  # type: ignore[attr-defined]
    assert '<p id="progress">nothing left;' in page and 'http-equiv="refresh"' not in page
    reloading = client.get("/?refresh=30").get_data(as_text=True)  # type: ignore[attr-defined]
    assert '<meta http-equiv="refresh" content="30">' in reloading
    odd = client.get("/?refresh=1").get_data(as_text=True)  # type: ignore[attr-defined]
    assert 'http-equiv="refresh"' not in odd  # only the offered intervals


def test_a_host_page_has_its_history_failure_rate_and_reason(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        store.add_host(conn, HostSpec(name="h1", capacity=2))
        ids = store.insert_jobs(conn, [NewJob("noop")] * 2, default_max_attempts=1).ids
        store.assign_jobs(conn, [(i, "h1") for i in ids])
        (ok, bad) = store.claim_jobs(conn, "h1", 2).jobs
        store.complete_job(conn, "h1", ok.id, ok.attempt, {"ok": True})
        store.fail_attempt(conn, "h1", bad.id, bad.attempt, "ValueError: no price", retry_at=None)
        store.reset_restart_counter(conn, "h1", {"duration_s": 1.5})
        store.drain_host(conn, "h1", "disk nearly full")
    client = _dashboard(engine, database_url)
    page = client.get("/hosts/h1").get_data(as_text=True)  # type: ignore[attr-defined]
    assert 'id="host-state">draining' in page and "disk nearly full" in page
    assert "Failure rate over the day: 50.0%" in page
    assert "restart" in page and "ValueError: no price" in page
    assert f'href="/jobs/{bad.id}"' in page
    overview = client.get("/").get_data(as_text=True)  # type: ignore[attr-defined]
    assert 'href="/hosts/h1"' in overview
    assert client.get("/hosts/nosuch").status_code == 404  # type: ignore[attr-defined]


def test_job_search_pages_by_id_with_the_total_and_a_since_filter(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        ids = store.insert_jobs(conn, [NewJob("noop")] * 120, default_max_attempts=3).ids
        conn.execute(
            sa.text("UPDATE jobs SET created_at = now() - interval '3 days' WHERE id <= :id"),
            {"id": ids[19]},
        )
    client = _dashboard(engine, database_url)
    first = client.get("/jobs?kind=noop").get_data(as_text=True)  # type: ignore[attr-defined]
    assert "120 matching job(s), newest first" in first
    assert f"ids {ids[-1]} to {ids[-50]} shown" in first
    second = client.get(f"/jobs?kind=noop&after={ids[-50]}").get_data(as_text=True)  # type: ignore[attr-defined]
    assert f"ids {ids[-51]} to {ids[-100]} shown" in second and 'id="more"' in second
    last = client.get(f"/jobs?kind=noop&after={ids[-100]}").get_data(as_text=True)  # type: ignore[attr-defined]
    assert f"ids {ids[19]} to {ids[0]} shown" in last and 'id="more"' not in last
    recent = client.get("/jobs?kind=noop&since=2d").get_data(as_text=True)  # type: ignore[attr-defined]
    assert "100 matching job(s)" in recent
    bad = client.get("/jobs?since=yesterday")  # type: ignore[attr-defined]
    assert bad.status_code == 400 and "since &#39;yesterday&#39;" in bad.get_data(as_text=True)


def test_times_read_as_ages_with_the_absolute_time_on_hover(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(conn, [NewJob("noop")], default_max_attempts=3).ids
        created = conn.execute(
            sa.text("SELECT created_at FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    later = created + timedelta(minutes=7, seconds=30)
    settings = load_settings(None, database_url=database_url)
    client = create_app(settings, engine, clock=lambda: later).test_client()
    page = client.get("/jobs?kind=noop").get_data(as_text=True)
    stamp = created.strftime("%Y-%m-%d %H:%M:%S")
    assert f'title="{stamp}' in page and ">7 min ago</time>" in page


def test_job_search_filters_by_error_class_and_shows_it(engine: Engine, database_url: str) -> None:
    with engine.begin() as conn:
        blocked, permanent = store.insert_jobs(
            conn, [NewJob("noop")] * 2, default_max_attempts=3
        ).ids
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'failed', error_class = CASE id WHEN :b THEN 'blocked'"
                " ELSE 'permanent' END WHERE id IN (:b, :p)"
            ),
            {"b": blocked, "p": permanent},
        )
    client = _dashboard(engine, database_url)
    page = client.get("/jobs?error_class=blocked").get_data(as_text=True)  # type: ignore[attr-defined]
    assert "1 matching job(s)" in page and f'href="/jobs/{blocked}"' in page
    assert f'href="/jobs/{permanent}"' not in page and "<td>blocked</td>" in page
    bad = client.get("/jobs?error_class=flaky")  # type: ignore[attr-defined]
    assert bad.status_code == 400 and "error class must be one of" in bad.get_data(as_text=True)


def _walk_pages(client: object, url: str) -> list[int]:
    """Every job id the search lists, following its "next page" links to the end."""
    ids: list[int] = []
    for _ in range(20):  # bounded: 120 jobs are three pages
        page = client.get(url).get_data(as_text=True)  # type: ignore[attr-defined]
        ids += [int(i) for i in re.findall(r'<tr><td><a href="/jobs/(\d+)">', page)]
        more = re.search(r'id="more" href="([^"]+)"', page)
        if more is None:
            return ids
        url = html.unescape(more.group(1))
    raise AssertionError(f"more than 20 pages from {url}")


def test_job_search_sorts_and_pages_through_ties_without_loss_or_repeat(
    engine: Engine, database_url: str
) -> None:
    with engine.begin() as conn:
        ids = store.insert_jobs(
            conn, [NewJob("noop", priority=i % 3) for i in range(120)], default_max_attempts=3
        ).ids
        # 80 finished jobs, ten to a second: the order's key ties across page boundaries.
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'completed',"
                " finished_at = TIMESTAMPTZ '2026-11-20 10:00:00+00' + (id / 10) * interval '1 s'"
                " WHERE id = ANY(:ids)"
            ),
            {"ids": ids[:80]},
        )
    with engine.connect() as conn:
        finished = dict(
            conn.execute(
                sa.text("SELECT id, finished_at FROM jobs WHERE id = ANY(:ids)"), {"ids": ids}
            ).all()
        )
    client = _dashboard(engine, database_url)
    assert _walk_pages(client, "/jobs?kind=noop") == sorted(ids, reverse=True)
    assert _walk_pages(client, "/jobs?kind=noop&sort=oldest") == sorted(ids)
    by_priority = sorted(ids, key=lambda i: (-(ids.index(i) % 3), i))
    assert _walk_pages(client, "/jobs?kind=noop&sort=priority") == by_priority
    done = [i for i in ids if finished[i] is not None]
    by_finish = sorted(done, key=lambda i: (finished[i], i), reverse=True)
    assert _walk_pages(client, "/jobs?kind=noop&sort=finished") == by_finish
    page = client.get("/jobs?sort=finished").get_data(as_text=True)  # type: ignore[attr-defined]
    assert "80 matching job(s), most recently finished first" in page
    bad = client.get("/jobs?sort=cheapest")  # type: ignore[attr-defined]
    assert bad.status_code == 400 and "sort must be one of newest" in bad.get_data(as_text=True)
    bad = client.get("/jobs?sort=finished&after=yesterday,3")  # type: ignore[attr-defined]
    assert bad.status_code == 400 and "bad finished_at" in bad.get_data(as_text=True)
