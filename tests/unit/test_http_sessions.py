"""A sticky session's jar as stored and back (common.http.session_jar): what the site set comes
back whole, expired and malformed entries are dropped, and the stored list is bounded."""

from __future__ import annotations

import time

import pytest

from scrapefleet.common.http.session_jar import MAX_COOKIES, HttpSession

pytestmark = pytest.mark.timeout(10)


def _entry(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "value": f"{name}-v", "domain": "a.test", "path": "/", **extra}


def test_a_jar_survives_being_stored_and_read_back() -> None:
    later = int(time.time()) + 3600
    stored = [_entry("visitor"), _entry("consent", expires=later, secure=True, host_only=False)]
    cookies, agent = HttpSession.from_stored(stored, "agent/1").stored()
    assert agent == "agent/1"
    assert {
        c["name"]: (c["value"], c["expires"], c["secure"], c["host_only"]) for c in cookies
    } == {
        "visitor": ("visitor-v", None, False, True),
        "consent": ("consent-v", later, True, False),
    }


def test_expired_and_malformed_entries_are_dropped_and_the_list_bounded() -> None:
    stored = [
        _entry("old", expires=int(time.time()) - 10),
        {"name": 3, "value": "x", "domain": "a.test", "path": "/"},
        "not an entry",
        *[_entry(f"c{n}") for n in range(MAX_COOKIES + 5)],
    ]
    cookies, _ = HttpSession.from_stored(stored, None).stored()
    names = {c["name"] for c in cookies}
    assert "old" not in names and len(cookies) == MAX_COOKIES
    assert HttpSession.from_stored(None, None).stored() == ([], None)  # a session's first job
