"""Proxy pools against real PostgreSQL: the operator's `scrapefleet proxies` commands, submit's
checks, the producer's leases (least recently used first, the per-proxy cap, the wait reason),
and a block charged to the proxy rather than the job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.api import validate_job
from scrapefleet.common.errors import SubmitError
from scrapefleet.common.identities.proxy_pools import LeaseOutcome, parse_proxy
from scrapefleet.common.ops.fleet_status import read_fleet_status
from scrapefleet.common.reads.kind_waits import job_wait_reason
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_daemon import Producer
from tests.cli_helpers import run_cli
from tests.integration.producer_helpers import (
    add_hosts,
    producer_settings,
    publish_status,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "s3cr3t-pw"


@pytest.fixture
def producer(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[Producer]:
    add_hosts(engine, {"h1": 6, "h2": 6})
    for host in ("h1", "h2"):
        publish_status(tmp_path, host)
    made = Producer(producer_settings(database_url, tmp_path), engine)
    yield made
    made.stop()


def _add(engine: Engine, pool: str, urls: list[str]) -> None:
    with engine.begin() as conn:
        store.add_proxies(conn, pool, [parse_proxy(u) for u in urls])


def _get(pool: str) -> NewJob:
    return validate_job(
        {"kind": "http_get", "payload": {"url": "http://a.test/", "proxy_pool": pool}}
    )


def _jobs(engine: Engine) -> dict[int, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM jobs ORDER BY id"))
        return {r.id: dict(r._mapping) for r in rows}


def _proxies(engine: Engine) -> dict[int, dict[str, Any]]:
    with engine.connect() as conn:
        return {r["id"]: r for r in store.list_proxies(conn)}


def _claim(engine: Engine, job_id: int) -> store.ClaimedJob:
    host = _jobs(engine)[job_id]["host"]
    with engine.begin() as conn:
        claimed = {job.id: job for job in store.claim_jobs(conn, host, 6).jobs}
    return claimed[job_id]


def test_the_commands_never_show_a_password_and_refuse_bad_input_whole(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    added = run_cli(
        ["proxies", "add", "res", f"http://u:{SECRET}@127.0.0.2:8080", "http://127.0.0.3:8080"],
        database_url,
    )
    assert added.returncode == 0, added.stderr
    assert "2 proxies added" in added.stdout

    bad = tmp_path / "more.txt"
    bad.write_text(f"# more\nhttp://127.0.0.4:8080\nftp://u:{SECRET}@127.0.0.5:21\n")
    refused = run_cli(["proxies", "import", "res", str(bad)], database_url)
    assert refused.returncode == 2
    assert "line 3: scheme" in refused.stderr
    refused = run_cli(["proxies", "add", "res", "http://127.0.0.9"], database_url)
    assert refused.returncode == 2 and "URL #1: must name the proxy's port" in refused.stderr
    refused = run_cli(
        ["proxies", "pool", "res", "--cooldown", "1h", "--max-cooldown", "1m"], database_url
    )
    assert refused.returncode == 2 and "--max-cooldown" in refused.stderr
    refused = run_cli(["proxies", "pool", "res", "--block-statuses", "403,200"], database_url)
    assert refused.returncode == 2 and "--block-statuses: '200'" in refused.stderr

    listed = run_cli(["proxies", "list", "res"], database_url)
    assert listed.returncode == 0, listed.stderr
    assert "http://***@127.0.0.2:8080" in listed.stdout
    assert "127.0.0.4" not in listed.stdout  # the refused file added nothing
    as_json = run_cli(["proxies", "list", "--json"], database_url)

    rotated = run_cli(["proxies", "add", "res", "http://u:new-pw-99@127.0.0.2:8080"], database_url)
    assert "0 proxies added, 1 updated" in rotated.stdout
    switched = [
        run_cli(["proxies", "disable", "res", "http://127.0.0.3:8080"], database_url),
        run_cli(
            ["proxies", "pool", "res", "--max-jobs-per-proxy", "2", "--cooldown", "30s"],
            database_url,
        ),
        run_cli(["proxies", "pool", "res", "--block-statuses", "403, 503"], database_url),
        run_cli(["proxies", "pools"], database_url),
    ]
    assert all(r.returncode == 0 for r in switched), [r.stderr for r in switched]
    assert "2 job(s) at once per proxy" in switched[3].stdout
    assert "block statuses 403,503;" in switched[3].stdout
    states = {r["url"]: r["state"] for r in _proxies(engine).values()}
    assert states == {"http://***@127.0.0.2:8080": "ready", "http://127.0.0.3:8080": "disabled"}
    gone = run_cli(["proxies", "remove", "res", "http://127.0.0.7:8080"], database_url)
    assert gone.returncode == 1 and "no proxy http://127.0.0.7:8080" in gone.stderr

    for result in (added, refused, listed, as_json, rotated, *switched, gone):
        assert SECRET not in result.stdout + result.stderr
        assert "new-pw-99" not in result.stdout + result.stderr
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT username, password FROM proxy_credentials")).all()
    assert [tuple(r) for r in stored] == [("u", "new-pw-99")]


def test_submit_refuses_an_unknown_pool_and_a_pool_with_a_proxy_of_its_own(
    engine: Engine,
) -> None:
    _add(engine, "res", ["http://127.0.0.2:8080"])
    with pytest.raises(SubmitError, match=r"job 2: payload.proxy_pool: no proxy pool named 'dc'"):
        submit(engine, [_get("res"), _get("dc")])
    assert _jobs(engine) == {}
    with pytest.raises(SubmitError, match=r"payload\.proxy_pool: the job names its own proxy"):
        validate_job(
            {
                "kind": "http_get",
                "payload": {
                    "url": "http://a.test/",
                    "proxy_pool": "res",
                    "proxy": "http://127.0.0.9:1",
                },
            }
        )
    _add(engine, "socks", [f"socks5://u:{SECRET}@127.0.0.2:1080"])
    browser = validate_job(
        {"kind": "fetch_page", "payload": {"url": "http://a.test/", "proxy_pool": "socks"}}
    )
    with pytest.raises(SubmitError, match="socks5 proxy with credentials"):
        submit(engine, [browser])


def test_leases_go_least_recently_used_first_under_the_cap_and_a_full_pool_waits(
    engine: Engine, producer: Producer
) -> None:
    _add(engine, "res", [f"http://127.0.0.{n}:8080" for n in (2, 3, 4)])
    ids = submit(engine, [_get("res") for _ in range(5)])
    assert producer.run_cycle().assigned == 3  # one job per proxy at once (the default cap)
    jobs = _jobs(engine)
    leased = [jobs[i]["proxy_id"] for i in ids[:3]]
    assert len(set(leased)) == 3 and jobs[ids[3]]["status"] == "pending"
    with engine.connect() as conn:
        assert job_wait_reason(conn, jobs[ids[3]]) == (
            "waiting: pool 'res' has no ready proxy (3 at their job cap)"
        )

    claimed = _claim(engine, ids[1])
    assert claimed.proxy_url is not None and claimed.proxy_block_statuses == (403, 429)
    with engine.begin() as conn:
        store.complete_job(conn, claimed_host(engine, ids[1]), ids[1], claimed.claim, {})
    assert producer.run_cycle().assigned == 1
    assert _jobs(engine)[ids[3]]["proxy_id"] == leased[1]  # the one proxy free again


def claimed_host(engine: Engine, job_id: int) -> str:
    return str(_jobs(engine)[job_id]["host"])


def test_a_block_cools_the_proxy_gives_the_job_another_and_bans_past_the_threshold(
    engine: Engine, producer: Producer, database_url: str
) -> None:
    _add(engine, "res", [f"http://u:{SECRET}@127.0.0.2:8080", "http://127.0.0.3:8080"])
    assert run_cli(["proxies", "pool", "res", "--ban-blocks", "2"], database_url).returncode == 0
    (job_id,) = submit(engine, [_get("res")])
    for round_ in range(3):
        producer.run_cycle()
        job = _jobs(engine)[job_id]
        claimed = _claim(engine, job_id)
        with engine.begin() as conn:
            status = store.release_blocked(
                conn,
                job["host"],
                job_id,
                claimed.claim,
                "403",
                max_blocks=10,
                profile_cooldown_s=60,
            )
        assert status == "pending"
        after = _jobs(engine)[job_id]
        assert after["attempts"] == 0  # a block uses no attempt
        if round_ == 0:
            first = job["proxy_id"]
            assert _proxies(engine)[first]["state"] == "cooling"
        if round_ == 1:
            assert job["proxy_id"] != first  # the cooling proxy was not leased again
            with engine.begin() as conn:  # its cool-down over: leasable again
                conn.execute(sa.text("UPDATE proxies SET cooldown_until = now()"))
    proxies = _proxies(engine)
    assert sorted(p["blocks"] for p in proxies.values()) == [1, 2]
    banned = [p for p in proxies.values() if p["state"] == "banned"]
    assert len(banned) == 1 and banned[0]["banned_until"] is not None
    with engine.connect() as conn:
        health = conn.execute(sa.text("SELECT * FROM identity_health WHERE kind = 'proxy'"))
        rows = {r.proxy_id: r for r in health}
        outcomes = conn.execute(sa.text("SELECT outcome FROM identity_leases")).scalars().all()
    assert rows[banned[0]["id"]].state == "banned"
    assert rows[banned[0]["id"]].ban_rate_hour == 1
    assert sorted(outcomes) == ["blocked"] * 3
    assert all(SECRET not in str(r._mapping) for r in rows.values())


def test_a_consumer_role_reads_only_the_proxy_its_attempt_leased(engine: Engine) -> None:
    _add(engine, "res", [f"http://u:{SECRET}@127.0.0.2:8080"])
    (job_id,) = submit(engine, [_get("res")])
    with engine.begin() as conn:  # not processing: nothing to read
        assert store.proxy_for_attempt(conn, job_id, 1) is None
        assert store.charge_identity(conn, job_id, 1, LeaseOutcome.BLOCKED) is None


def test_a_job_blocked_enough_on_a_pool_escalates_to_its_next_pool(
    engine: Engine, producer: Producer, database_url: str
) -> None:
    _add(engine, "cheap", ["http://127.0.0.2:8080", "http://127.0.0.3:8080"])
    _add(engine, "res", ["http://127.0.0.4:8080"])
    tier = ["proxies", "pool", "cheap", "--next-pool", "res", "--escalate-after", "2"]
    assert run_cli(tier, database_url).returncode == 0
    to_self = run_cli(["proxies", "pool", "cheap", "--next-pool", "cheap"], database_url)
    assert to_self.returncode == 2 and "itself" in to_self.stderr
    unknown = run_cli(["proxies", "pool", "cheap", "--next-pool", "nope"], database_url)
    assert unknown.returncode == 1 and "'nope'" in unknown.stderr
    (job_id,) = submit(engine, [_get("cheap")])
    pools = []
    for _ in range(3):
        producer.run_cycle()
        job = _jobs(engine)[job_id]
        pools.append((job["proxy_pool"], _proxies(engine)[job["proxy_id"]]["pool"]))
        claimed = _claim(engine, job_id)
        with engine.begin() as conn:
            store.release_blocked(
                conn, job["host"], job_id, claimed.claim, "403", max_blocks=10,
                profile_cooldown_s=60,
            )  # fmt: skip
    # Two blocks on the cheap pool's two proxies, then the expensive pool's proxy.
    assert pools == [("cheap", "cheap"), ("cheap", "cheap"), ("res", "res")]
    shown = run_cli(["proxies", "pools"], database_url).stdout
    assert "after 2 blocks of a job: pool res" in shown


def test_status_names_a_pool_that_waits_and_one_in_trouble(engine: Engine) -> None:
    _add(engine, "res", ["http://127.0.0.2:8080", "http://127.0.0.3:8080"])
    submit(engine, [_get("res") for _ in range(3)])
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE proxies SET banned_until = now() + interval '1 hour'"))
        conn.execute(
            sa.text(
                "INSERT INTO identity_leases (job_id, proxy_id, outcome, ended_at)"
                " SELECT n, 1 + n % 2, CASE WHEN n % 4 = 0 THEN 'ok' ELSE 'blocked' END, now()"
                " FROM generate_series(1, 12) AS n"
            )
        )
    with engine.connect() as conn:
        text = read_fleet_status(conn).text()
    assert "3 job(s) waiting: pool 'res' has no ready proxy (2 banned)" in text
    assert "pool 'res': 75% of its leases blocked in the last hour (9 of 12)" in text


def test_submit_from_a_file_names_the_bad_pool_and_inserts_nothing(
    engine: Engine, database_url: str
) -> None:
    _add(engine, "res", ["http://127.0.0.2:8080"])
    good = {"kind": "http_get", "payload": {"url": "http://a.test/", "proxy_pool": "res"}}
    bad_name = {"kind": "http_get", "payload": {"url": "http://a.test/", "proxy_pool": "a b"}}
    unknown = {"kind": "http_get", "payload": {"url": "http://a.test/", "proxy_pool": "dc"}}

    named = run_cli(
        ["submit", "-"], database_url, stdin=f"{json.dumps(good)}\n{json.dumps(bad_name)}\n"
    )
    assert named.returncode == 2
    assert "line 2: payload.proxy_pool: 'a b' is not a pool name" in named.stderr
    missing = run_cli(
        ["submit", "-"], database_url, stdin=f"{json.dumps(good)}\n{json.dumps(unknown)}\n"
    )
    assert missing.returncode == 2
    assert "job 2: payload.proxy_pool: no proxy pool named 'dc'" in missing.stderr
    assert _jobs(engine) == {}
    pinned = run_cli(["submit", "-", "--host", "h1"], database_url, stdin=json.dumps(good))
    assert pinned.returncode == 2 and "a proxy pool" in pinned.stderr


def _session_get(url: str, session: str = "site") -> NewJob:
    payload = {"url": url, "proxy_pool": "res", "session": session}
    return validate_job({"kind": "http_get", "payload": payload})


def test_a_sticky_session_keeps_its_proxy_until_a_block_retires_it(
    engine: Engine, producer: Producer
) -> None:
    _add(engine, "res", [f"http://127.0.0.{n}:8080" for n in (2, 3, 4)])
    with pytest.raises(SubmitError, match=r"payload\.session: a session needs a proxy_pool"):
        validate_job({"kind": "http_get", "payload": {"url": "http://a.test/", "session": "x"}})
    ids = submit(engine, [_session_get(f"http://shop.test/{n}") for n in range(3)])
    assert {_jobs(engine)[i]["proxy_session"] for i in ids} == {"shop.test"}  # "site": the host
    leased = []
    for job_id in ids[:2]:
        producer.run_cycle()
        job = _jobs(engine)[job_id]
        leased.append(job["proxy_id"])
        claimed = _claim(engine, job_id)
        with engine.begin() as conn:
            store.complete_job(conn, job["host"], job_id, claimed.claim, {})
    assert leased[0] == leased[1]  # the session's proxy, though others were used less lately
    producer.run_cycle()
    job = _jobs(engine)[ids[2]]
    assert job["proxy_id"] == leased[0]
    claimed = _claim(engine, ids[2])
    with engine.begin() as conn:
        store.release_blocked(
            conn, job["host"], ids[2], claimed.claim, "403", max_blocks=10, profile_cooldown_s=60
        )
    producer.run_cycle()
    assert _jobs(engine)[ids[2]]["proxy_id"] != leased[0]  # retired: a new session elsewhere
    with engine.connect() as conn:
        session = conn.execute(sa.text("SELECT * FROM proxy_sessions")).one()
    assert (session.key, session.uses, session.retired_at) == ("shop.test", 1, None)
