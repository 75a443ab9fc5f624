"""Error classes against real PostgreSQL: the store keeps each attempt's class, a blocked attempt
goes back without using an attempt (bounded), the views show and group the class, a consumer's
role does it for its own jobs only; and a real consumer running http_get against a server on
127.0.0.1: a 404 fails after one attempt, a 429's Retry-After is waited for, an action's
Blocked hands the job back until the bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.actions.registry import Blocked, register
from scrapefleet.common.clock import utcnow
from scrapefleet.common.ops.dashboard.app import create_app
from scrapefleet.common.reads.progress import read_rows
from scrapefleet.common.settings import load_settings
from scrapefleet.common.store import HostSpec, NewJob
from tests.browser.pushback_site import PushbackSite
from tests.cli_helpers import run_cli
from tests.integration import test_db_roles as roles
from tests.integration.test_consumer import (
    all_in,
    assign_due_pending,
    consumer_thread,
    job_row,
    make_settings,
    queue_jobs,
    wait_started,
)
from tests.integration.test_db_roles import OTHER, OWN
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

fleet, admin, own = roles.fleet, roles.admin, roles.own
HOST = "c1"  # test_consumer's


def _claimed(engine: Engine, host: str, kind: str = "noop", max_attempts: int = 3) -> int:
    with engine.begin() as conn:
        (job_id,) = store.insert_jobs(
            conn, [NewJob(kind, max_attempts=max_attempts)], default_max_attempts=3
        ).ids
        store.assign_jobs(conn, [(job_id, host)])
        claimed = store.claim_jobs(conn, host, 10).jobs
    assert [j.id for j in claimed] == [job_id]
    return job_id


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()


def _reclaim(engine: Engine, job_id: int, host: str) -> int:
    """The producer's and the consumer's part again: the job assigned and claimed; its claim
    (the attempt's token for its writes)."""
    with engine.begin() as conn:
        store.assign_jobs(conn, [(job_id, host)])
        (job,) = store.claim_jobs(conn, host, 10).jobs
    return job.claim


def _attempt_ends(engine: Engine, job_id: int) -> list[Any]:
    """The job's audit rows that ended an attempt, in order."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT to_status, message, error_class FROM job_events"
                    " WHERE job_id = :id AND from_status = 'processing' ORDER BY id"
                ),
                {"id": job_id},
            ).all()
        )


@pytest.fixture
def hosts(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in ("h1", "h2"):
            store.add_host(conn, HostSpec(name=name, capacity=6, address=f"10.8.0.{name[-1]}"))


# ---------------------------------------------------------------- the store


def test_a_blocked_attempt_uses_no_attempt_until_the_bound(engine: Engine, hosts: None) -> None:
    job_id = _claimed(engine, "h1")
    claim = 1
    for n, host in enumerate(["h1", "h2"], start=1):
        with engine.begin() as conn:
            status = store.release_blocked(
                conn, host, job_id, claim, "captcha", max_blocks=3, profile_cooldown_s=60
            )
        row = _row(engine, job_id)
        assert status == "pending" and row.status == "pending" and row.host is None
        assert (row.attempts, row.blocks, row.blocked_on_host) == (0, n, host)
        assert row.error_class == "blocked" and row.last_error == "Blocked: captcha"
        claim = _reclaim(engine, job_id, "h2" if host == "h1" else "h1")
        # The block gave the attempt back; the claim, the attempt's token, never goes back.
        assert (_row(engine, job_id).attempts, claim) == (1, n + 1)
    with engine.begin() as conn:
        status = store.release_blocked(
            conn, "h1", job_id, claim, "captcha", max_blocks=3, profile_cooldown_s=60
        )
    row = _row(engine, job_id)
    assert status == row.status == "failed" and row.finished_at is not None
    assert (row.blocks, row.error_class, row.host) == (3, "blocked", "h1")
    assert row.last_error == "Blocked: captcha (blocked 3 times)"
    ended = _attempt_ends(engine, job_id)
    assert [(e.message, e.error_class) for e in ended] == [("blocked: captcha", "blocked")] * 3
    with engine.connect() as conn:
        failures = conn.execute(
            sa.text("SELECT error_class FROM recent_failures WHERE job_id = :id"), {"id": job_id}
        ).scalar_one()
    assert failures == "blocked"


def test_a_blocked_job_cools_its_profile_down(engine: Engine, hosts: None) -> None:
    job = NewJob("fetch_page", {"url": "http://shop.test/", "browser": {"profile": "acct-9"}})
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM profiles"))
        (job_id,) = store.insert_jobs(conn, [job], default_max_attempts=3).ids
        store.assign_jobs(conn, [(job_id, "h1")])
        store.bind_profiles(conn, [(job_id, "acct-9", "h1")])
        store.claim_jobs(conn, "h1", 10)
        store.release_blocked(
            conn, "h1", job_id, 1, "captcha", max_blocks=3, profile_cooldown_s=600
        )
    with engine.connect() as conn:
        profile = conn.execute(
            sa.text(
                "SELECT state, blocks, cooldown_until > now() + interval '590 seconds' AS cooling"
                " FROM profiles WHERE name = 'acct-9'"
            )
        ).one()
    assert (profile.state, profile.blocks, profile.cooling) == ("cooling", 1, True)
    assert _row(engine, job_id).profile == "acct-9"  # the producer's hint: try another


def test_a_block_of_an_attempt_no_longer_ours_changes_nothing(engine: Engine, hosts: None) -> None:
    job_id = _claimed(engine, "h1")
    with engine.begin() as conn:
        assert (
            store.release_blocked(conn, "h2", job_id, 1, "x", max_blocks=3, profile_cooldown_s=0)
            is None
        )
        assert (
            store.release_blocked(conn, "h1", job_id, 2, "x", max_blocks=3, profile_cooldown_s=0)
            is None
        )
    row = _row(engine, job_id)
    assert (row.status, row.blocks, row.error_class) == ("processing", 0, None)


def test_a_failure_keeps_its_class_and_the_views_show_and_group_it(
    engine: Engine, hosts: None
) -> None:
    failures = [
        ("permanent", "HttpError: loading http://shop/item/1: HTTP 404"),
        ("permanent", "HttpError: loading http://shop/item/2: HTTP 404"),
        ("transient", "HttpError: loading http://shop/item/3: HTTP 404"),  # one page, one class
        ("rate_limited", "HttpError: loading http://shop/item/4: HTTP 429"),
    ]
    ids = []
    for error_class, error in failures:
        job_id = _claimed(engine, "h1", kind="prices")
        with engine.begin() as conn:
            status = store.fail_attempt(
                conn, "h1", job_id, 1, error, retry_at=None, error_class=error_class
            )
        assert status == "failed"
        ids.append(job_id)
    with engine.connect() as conn:
        shown = dict(
            conn.execute(
                sa.text("SELECT job_id, error_class FROM recent_failures WHERE kind = 'prices'")
            ).all()
        )
        groups = read_rows(conn, "failure_groups")
    assert shown == {job_id: c for job_id, (c, _) in zip(ids, failures, strict=True)}
    by_class = {(g["error_class"], g["error"]): g["jobs"] for g in groups}
    # Status codes stay in the group (migration 0022): a 429 is not a 404.
    assert by_class == {
        ("permanent", "HttpError: loading <url> HTTP 404"): 2,
        ("transient", "HttpError: loading <url> HTTP 404"): 1,
        ("rate_limited", "HttpError: loading <url> HTTP 429"): 1,
    }


def test_an_unknown_class_is_refused_by_the_database(engine: Engine, hosts: None) -> None:
    job_id = _claimed(engine, "h1")
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        store.fail_attempt(conn, "h1", job_id, 1, "x", retry_at=None, error_class="flaky")


def test_an_operator_retry_gives_a_blocked_job_its_blocks_back(engine: Engine, hosts: None) -> None:
    job_id = _claimed(engine, "h1")
    with engine.begin() as conn:
        store.release_blocked(conn, "h1", job_id, 1, "captcha", max_blocks=1, profile_cooldown_s=0)
    assert _row(engine, job_id).status == "failed"
    with engine.begin() as conn:
        store.retry_jobs(conn, store.JobFilter(ids=(job_id,)))
    row = _row(engine, job_id)
    assert (row.status, row.blocks, row.attempts) == ("pending", 0, 0)


def test_jobs_show_and_the_dashboard_say_the_class(
    engine: Engine, hosts: None, database_url: str, tmp_path: Path
) -> None:
    job_id = _claimed(engine, "h1")
    with engine.begin() as conn:
        store.release_blocked(conn, "h1", job_id, 1, "captcha", max_blocks=1, profile_cooldown_s=0)
    shown = run_cli(["jobs", "show", str(job_id)], database_url)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert "error_class: blocked" in lines and "blocked_on_host: h1" in lines
    assert "blocks: 1" in lines
    assert any(line.endswith("[blocked]  (blocked: captcha)") for line in lines)
    settings = load_settings(None, database_url=database_url, artifacts_dir=tmp_path)
    page = create_app(settings, engine).test_client().get(f"/jobs/{job_id}")
    text = page.get_data(as_text=True)
    assert page.status_code == 200
    assert '<th style="width:160px">error_class</th><td>blocked</td>' in text
    assert '<th style="width:160px">blocked_on_host</th><td>h1</td>' in text
    assert "<td>blocked</td><td>blocked: captcha</td>" in text  # the attempt's row


def test_each_attempt_keeps_its_own_class_and_a_release_has_none(
    engine: Engine, hosts: None
) -> None:
    job_id = _claimed(engine, "h1", max_attempts=3)
    with engine.begin() as conn:
        store.fail_attempt(
            conn, "h1", job_id, 1, "HTTP 429", retry_at=utcnow(), error_class="rate_limited"
        )
    attempt = _reclaim(engine, job_id, "h1")
    with engine.begin() as conn:
        assert store.release_job(conn, "h1", job_id, attempt, "released: no browser session")
    attempt = _reclaim(engine, job_id, "h1")
    with engine.begin() as conn:
        store.fail_attempt(conn, "h1", job_id, attempt, "boom", retry_at=utcnow())
    attempt = _reclaim(engine, job_id, "h1")
    with engine.begin() as conn:
        store.fail_attempt(
            conn, "h1", job_id, attempt, "HTTP 404", retry_at=None, error_class="permanent"
        )
    ended = _attempt_ends(engine, job_id)
    with engine.connect() as conn:
        others = conn.execute(
            sa.text(
                "SELECT count(*) FROM job_events WHERE job_id = :id"
                " AND from_status IS DISTINCT FROM 'processing' AND error_class IS NOT NULL"
            ),
            {"id": job_id},
        ).scalar()
    assert [(e.to_status, e.error_class) for e in ended] == [
        ("pending", "rate_limited"),
        ("pending", None),  # the release: the host's fault, no failed attempt
        ("pending", "transient"),
        ("failed", "permanent"),
    ]
    assert others == 0


# ---------------------------------------------------------------- a consumer's role


def test_a_consumer_blocks_and_classifies_only_its_own_jobs(admin: Engine, own: Engine) -> None:
    blocked, failed, theirs = (_claimed(admin, host) for host in (OWN, OWN, OTHER))
    with own.begin() as conn:
        assert (
            store.release_blocked(
                conn, OWN, blocked, 1, "captcha", max_blocks=3, profile_cooldown_s=60
            )
            == "pending"
        )
        assert (
            store.fail_attempt(conn, OWN, failed, 1, "gone", retry_at=None, error_class="permanent")
            == "failed"
        )
        assert (
            store.release_blocked(
                conn, OTHER, theirs, 1, "captcha", max_blocks=3, profile_cooldown_s=60
            )
            is None
        )
        assert (
            store.fail_attempt(
                conn, OTHER, theirs, 1, "gone", retry_at=None, error_class="permanent"
            )
            is None
        )
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT blocks, blocked_on_host, error_class, status FROM jobs ORDER BY id")
        ).all()
    assert [tuple(r) for r in rows] == [
        (1, OWN, "blocked", "pending"),
        (0, None, "permanent", "failed"),
        (0, None, None, "processing"),
    ]


# ---------------------------------------------------------------- a real consumer


@pytest.fixture
def site() -> Iterator[PushbackSite]:
    with PushbackSite() as running:
        yield running


class _BlockedParams(BaseModel):
    pass


@register("test_error_classes_always_blocked", _BlockedParams)
def _always_blocked(params: _BlockedParams) -> dict[str, Any]:
    raise Blocked("the site shows a captcha")


def _attempt_times(engine: Engine, job_id: int) -> list[tuple[str, str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT from_status, to_status, at FROM job_events"
                " WHERE job_id = :id AND (from_status = 'processing' OR to_status = 'processing')"
                " ORDER BY id"
            ),
            {"id": job_id},
        ).all()
    return [(r.from_status, r.to_status, r.at) for r in rows]


def test_a_real_consumer_classifies_http_get_and_a_blocked_action(
    engine: Engine, database_url: str, tmp_path: Path, site: PushbackSite
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=3, max_blocks_per_job=2)
    with consumer_thread(settings, database_url):
        wait_started(engine, settings)
        gone, busy, blocked = queue_jobs(
            engine,
            [
                NewJob("http_get", {"url": site.url("/gone")}, max_attempts=3),
                NewJob("http_get", {"url": site.url("/busy")}, max_attempts=3),
                NewJob("test_error_classes_always_blocked", {}, max_attempts=1),
            ],
        )
        wait_for(
            lambda: (
                all_in(engine, [gone, blocked], "failed") and all_in(engine, [busy], "completed")
            ),
            timeout_s=scaled(30),
            what="the 404 and the blocked job failed, the 429 completed",
            between=lambda: assign_due_pending(engine),
        )
    gone_row, busy_row, blocked_row = (job_row(engine, i) for i in (gone, busy, blocked))

    # A 404 is permanent: one attempt, whatever attempts were left.
    assert (gone_row.attempts, gone_row.error_class) == (1, "permanent")
    assert "HTTP 404" in gone_row.last_error

    # A 429 with Retry-After: 3 ran again no sooner than 3 s after its attempt ended (the
    # backoff alone would have been 0.1 s), measured on the attempts' recorded times.
    moves = _attempt_times(engine, busy)
    first_ended = next(at for f, t, at in moves if (f, t) == ("processing", "pending"))
    second_started = [at for f, t, at in moves if (f, t) == ("queued", "processing")][1]
    assert (second_started - first_ended).total_seconds() >= 3.0
    assert (busy_row.attempts, busy_row.error_class) == (2, "rate_limited")

    # Blocked twice (the bound), with max_attempts 1: no attempt was used by either block.
    assert (blocked_row.blocks, blocked_row.error_class, blocked_row.attempts) == (2, "blocked", 0)
    assert blocked_row.blocked_on_host == HOST
    assert "the site shows a captcha" in blocked_row.last_error
