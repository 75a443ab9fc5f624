"""common.actions.spawn and the runner: an action's follow-up jobs, checked before anything is
written."""

from __future__ import annotations

from typing import Any

import pytest

from scrapefleet.common.actions.registry import register
from scrapefleet.common.actions.spawn import (
    MAX_DEDUPE_KEY_CHARS,
    MAX_SPAWN_PER_ATTEMPT,
    Child,
    Spawned,
    SpawnError,
    validate_spawn,
)
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.runner import run_job

pytestmark = pytest.mark.timeout(10)


def _job(kind: str, payload: Any = None) -> ClaimedJob:
    return ClaimedJob(
        id=7, kind=kind, payload=payload or {}, attempt=1, max_attempts=3, lock_key=None
    )


@register("test_spawn_returns", spawns=["noop"])
def _returns(params: Any) -> Spawned:
    return Spawned({"ok": True}, params.model_dump()["spawn"])


@register("test_spawn_plain_spawn_key")
def _plain(params: Any) -> dict[str, Any]:
    return {"spawn": [{"kind": "nope"}]}  # a plain result: data, never children


def _entry(**over: Any) -> dict[str, Any]:
    return {"kind": "noop", "payload": {}} | over


def test_valid_entries_become_children() -> None:
    children = validate_spawn(
        [
            _entry(dedupe_key="k", priority=5),
            Child("http_get", {"url": "http://a.test/"}),
            {"kind": "screenshot", "payload": {"url": "http://b.test/"}},
        ]
    )
    assert children[0] == Child("noop", {}, "k", 5, needs_browser=False)
    assert children[1].needs_browser is False
    assert children[2].needs_browser is True  # from the action, not from the entry
    assert children[0].as_json() == {
        "kind": "noop",
        "payload": {},
        "needs_browser": False,
        "dedupe_key": "k",
        "priority": 5,
    }


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([_entry(), _entry(kind="no_such_kind")], r"spawn\[1\]\.kind: unknown job kind"),
        ([_entry(payload=[1])], r"spawn\[0\]\.payload: must be an object, not list"),
        ([_entry(), _entry(payload={"sleep_s": -1})], r"spawn\[1\]\.payload\.sleep_s"),
        ([_entry(dedupe_key="x" * (MAX_DEDUPE_KEY_CHARS + 1))], r"spawn\[0\]\.dedupe_key: 2049"),
        ([_entry(dedupe_key="")], r"spawn\[0\]\.dedupe_key: must be a non-empty string"),
        ([_entry(priority="high")], r"spawn\[0\]\.priority: must be an integer"),
        ([_entry(priority=10**7)], r"spawn\[0\]\.priority: must be between"),
        ([_entry(url="x")], r"spawn\[0\]\.url: unknown field"),
        (["noop"], r"spawn\[0\]: must be an object, not str"),
        ([_entry()] * (MAX_SPAWN_PER_ATTEMPT + 1), r"spawn: 1001 entries, at most 1000"),
        ({"kind": "noop"}, r"spawn must be a list of entries, not dict"),
        (
            [
                {
                    "kind": "fetch_page",
                    "payload": {"url": "http://a.test/", "browser": {"profile": "p"}},
                }
            ],
            r"spawn\[0\]\.payload\.browser\.profile: a spawned job cannot run in a profile",
        ),
    ],
)
def test_a_bad_entry_is_named(entries: Any, message: str) -> None:
    with pytest.raises(SpawnError, match=message):
        validate_spawn(entries)


def test_a_bad_entry_fails_the_attempt_with_no_children() -> None:
    spawn = [_entry(), _entry(kind="no_such_kind")]
    outcome = run_job(_job("test_spawn_returns", {"spawn": spawn}))
    assert outcome.status == "failed"
    assert outcome.retryable is False  # the action returns the same list next time
    assert outcome.spawn == ()
    assert outcome.error is not None and "spawn[1].kind: unknown job kind" in outcome.error


def test_a_good_spawn_completes_with_its_children() -> None:
    outcome = run_job(_job("test_spawn_returns", {"spawn": [_entry(dedupe_key="a")]}))
    assert outcome.status == "completed"
    assert outcome.result == {"ok": True}
    assert outcome.spawn == (Child("noop", {}, "a"),)


def test_a_kind_the_action_does_not_declare_fails_the_attempt() -> None:
    entry = _entry(kind="http_get", payload={"url": "http://a.test/"})
    outcome = run_job(_job("test_spawn_returns", {"spawn": [entry]}))
    assert outcome.status == "failed" and not outcome.retryable
    assert "spawns kind 'http_get', which it does not declare" in (outcome.error or "")


def test_a_plain_result_with_a_spawn_key_is_data() -> None:
    outcome = run_job(_job("test_spawn_plain_spawn_key"))
    assert outcome.status == "completed"
    assert outcome.result == {"spawn": [{"kind": "nope"}]}
    assert outcome.spawn == ()
