"""The planner's proxy rules (producer.assigning.proxy_rules) and what an attempt through a leased
proxy makes of its failure (consumer.proxy_use): pure, no database, no socket."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from scrapefleet.common.actions.error_classes import Blocked
from scrapefleet.common.api import refuse_unpinnable
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.http.client import HTTPStatusFailure
from scrapefleet.common.store import (
    ClaimedJob,
    NewJob,
    PendingJob,
    ProfileRow,
    ProxyRow,
    SessionRow,
)
from scrapefleet.consumer.proxy_use import proxy_verdict, scrub, with_leased_proxy
from scrapefleet.consumer.runner import run_job
from scrapefleet.producer.assigning.planner import HostSlots, plan_assignments
from scrapefleet.producer.assigning.profile_rules import ProfilePlacement
from scrapefleet.producer.assigning.proxy_rules import ProxyPlacement

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
HOSTS = [HostSlots("h1", 6, 0, 6), HostSlots("h2", 6, 0, 6)]


def _proxy(
    proxy_id: int,
    *,
    used_s_ago: float | None = None,
    cool_for_s: float | None = None,
    ban_for_s: float | None = None,
    state: str = "ready",
    in_flight: int = 0,
    cap: int = 1,
) -> ProxyRow:
    def later(seconds: float | None) -> datetime | None:
        return None if seconds is None else NOW + timedelta(seconds=seconds)

    used = None if used_s_ago is None else NOW - timedelta(seconds=used_s_ago)
    return ProxyRow(
        proxy_id, "res", state, later(cool_for_s), later(ban_for_s), used, in_flight, cap
    )


def _job(job_id: int, last: int | None = None, pool: str | None = "res") -> PendingJob:
    return PendingJob(job_id, None, False, proxy_pool=pool, last_proxy=last)


def _plan(jobs: list[PendingJob], *proxies: ProxyRow) -> tuple[list[int], dict[int, int]]:
    placement = ProxyPlacement(proxies, NOW)
    plan = plan_assignments(HOSTS, jobs, set(), placement)
    return [job_id for job_id, _ in plan], placement.chosen


def test_least_recently_used_first_and_this_plans_leases_count_as_uses() -> None:
    proxies = (_proxy(1, used_s_ago=10), _proxy(2), _proxy(3, used_s_ago=60))
    placed, chosen = _plan([_job(n) for n in (10, 11, 12)], *(replace(p, cap=2) for p in proxies))
    assert placed == [10, 11, 12]
    assert [chosen[n] for n in (10, 11, 12)] == [2, 3, 1]  # never used, then the oldest use


def test_the_cap_counts_the_fleet_and_the_plan_and_a_full_pool_waits() -> None:
    placed, chosen = _plan(
        [_job(n) for n in (10, 11, 12)], _proxy(1, in_flight=1, cap=2), _proxy(2, cap=1)
    )
    assert placed == [10, 11]  # one more on proxy 1, one on proxy 2, then none left
    assert sorted(chosen.values()) == [1, 2]


def test_cooling_banned_and_disabled_proxies_are_not_leased_until_their_time_passes() -> None:
    out = (_proxy(1, cool_for_s=30), _proxy(2, ban_for_s=600), _proxy(3, state="disabled"))
    assert _plan([_job(10)], *out) == ([], {})
    over = _proxy(4, cool_for_s=-1, ban_for_s=-1, state="banned")  # both passed: usable
    assert _plan([_job(10)], *out, over) == ([10], {10: 4})


def test_a_job_sent_back_gets_another_proxy_while_there_is_one() -> None:
    assert _plan([_job(10, last=1)], _proxy(1), _proxy(2, used_s_ago=5))[1] == {10: 2}
    assert _plan([_job(10, last=1)], _proxy(1))[1] == {10: 1}  # the only one: it again


def test_jobs_without_a_pool_pass_and_the_profile_rules_still_decide_the_host() -> None:
    profiles = ProfilePlacement({"acct": ProfileRow("acct", "h2", None, None)}, NOW)
    placement = ProxyPlacement([_proxy(1)], NOW, profiles)
    job = PendingJob(10, None, True, ("acct",), proxy_pool="res")
    plan = plan_assignments(HOSTS, [job, _job(11, pool=None)], set(), placement)
    assert (10, "h2") in plan and len(plan) == 2
    assert placement.chosen == {10: 1} and profiles.chosen == {10: "acct"}


def test_the_leased_proxy_replaces_the_pool_in_the_payload_the_attempt_runs_with() -> None:
    url = "http://u:pw@127.0.0.2:8080"
    payload = {"url": "http://a.test/", "proxy_pool": "res", "browser": {"locale": "de-DE"}}
    assert with_leased_proxy(payload, url, needs_browser=True, takes_proxy=False) == {
        "url": "http://a.test/",
        "browser": {"locale": "de-DE", "proxy": url},
    }
    assert with_leased_proxy(payload, url, needs_browser=False, takes_proxy=True)["proxy"] == url
    assert "proxy_pool" in payload  # the job's own payload is left as it was


def test_a_refused_exit_is_a_block_an_unreachable_proxy_an_error_the_rest_the_page() -> None:
    def status(code: int) -> Exception:
        try:
            raise HTTPStatusFailure(f"HTTP {code}", code)
        except HTTPStatusFailure as exc:
            return exc

    assert proxy_verdict(status(403), (403, 429)) == "blocked"
    assert proxy_verdict(status(407), ()) == "blocked"  # the proxy's own refusal
    assert proxy_verdict(status(404), (403, 429)) is None
    assert proxy_verdict(status(403), ()) is None  # a pool that names no such status
    try:
        try:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        except httpx.ConnectError as inner:
            raise RuntimeError("ConnectError fetching http://a.test/") from inner
    except RuntimeError as outer:
        assert proxy_verdict(outer, (403,)) == "error"
    assert proxy_verdict(Exception("net::ERR_PROXY_CONNECTION_FAILED"), ()) == "error"
    assert proxy_verdict(Blocked("captcha"), (403,)) is None  # a block already, as it was
    assert proxy_verdict(ValueError("no price on the page"), (403,)) is None


def test_the_leased_password_is_scrubbed_from_what_the_attempt_leaves() -> None:
    url = "http://u:p%40ss-word@127.0.0.2:8080"
    text = "ProxyError via http://u:p%40ss-word@127.0.0.2:8080 (p@ss-word)"
    assert scrub(text, url) == "ProxyError via http://u:***@127.0.0.2:8080 (***)"
    assert scrub(None, url) is None and scrub("x", None) == "x"


def test_a_pool_job_with_no_proxy_leased_is_released_never_run_direct() -> None:
    job = ClaimedJob(
        1, "noop", {"proxy_pool": "res"}, 1, 3, None, proxy_pool="res", proxy_id=7
    )  # its proxy removed before the claim read it
    outcome = run_job(job)
    assert outcome.status == "released"
    assert "no proxy of pool 'res'" in (outcome.error or "")


def test_a_pool_job_cannot_be_pinned_to_a_host() -> None:
    with pytest.raises(SubmitError, match=r"job 1: .* a proxy pool"):
        refuse_unpinnable([NewJob("http_get", {"url": "http://a.test/"}, proxy_pool="res")])


def _session_job(job_id: int, key: str, last: int | None = None) -> PendingJob:
    return PendingJob(job_id, None, False, proxy_pool="res", last_proxy=last, proxy_session=key)


def _sessions(*rows: SessionRow) -> dict[tuple[str, str], SessionRow]:
    return {(r.pool, r.key): r for r in rows}


def test_a_live_session_keeps_its_proxy_and_waits_for_it_at_its_cap() -> None:
    proxies = [_proxy(1, used_s_ago=5), _proxy(2)]  # 2 is the least recently used
    live = _sessions(SessionRow("res", "shop.test", 1, 3, True))
    placement = ProxyPlacement(proxies, NOW, sessions=live)
    jobs = [_session_job(10, "shop.test"), _session_job(11, "shop.test"), _job(12)]
    plan = plan_assignments(HOSTS, jobs, set(), placement)
    assert placement.chosen == {10: 1, 12: 2}  # 11 waits for its session's proxy
    assert [job_id for job_id, _ in plan] == [10, 12]


def test_a_new_session_binds_one_proxy_for_all_its_jobs_of_a_plan() -> None:
    proxies = [replace(_proxy(n), cap=3) for n in (1, 2, 3)]
    placement = ProxyPlacement(proxies, NOW)
    jobs = [_session_job(10, "a"), _session_job(11, "b"), _session_job(12, "a")]
    plan_assignments(HOSTS, jobs, set(), placement)
    assert placement.chosen[10] == placement.chosen[12] != placement.chosen[11]


def test_a_retired_session_or_an_unusable_proxy_starts_the_session_again_elsewhere() -> None:
    retired = _sessions(SessionRow("res", "a", 1, 3, False))
    assert _placed(retired, _proxy(1), _proxy(2, used_s_ago=5), last=1) == {10: 2}
    cooling = _sessions(SessionRow("res", "a", 1, 3, True))
    assert _placed(cooling, _proxy(1, cool_for_s=60), _proxy(2, used_s_ago=5)) == {10: 2}


def _placed(
    sessions: dict[tuple[str, str], SessionRow], *proxies: ProxyRow, last: int | None = None
) -> dict[int, int]:
    placement = ProxyPlacement(proxies, NOW, sessions=sessions)
    plan_assignments(HOSTS, [_session_job(10, "a", last)], set(), placement)
    return placement.chosen
