"""A spawned job's proxy pool: its own, its action's default, else its parent's (and the
parent's sticky session); never the URL of the proxy its parent's attempt leased."""

from __future__ import annotations

import pytest

from scrapefleet.common.actions.spawn import SpawnError, validate_spawn

pytestmark = pytest.mark.timeout(10)

LEASED = "http://u:pw-secret@10.0.0.9:8080"
PARENT = {"proxy_pool": "res", "session": "site"}


def _payload(entry: dict[str, object], **kwargs: object) -> dict[str, object]:
    (child,) = validate_spawn([{"kind": "http_get", "payload": entry}], **kwargs)  # type: ignore[arg-type]
    return child.payload


def test_a_child_naming_no_pool_inherits_its_parents_pool_and_session() -> None:
    assert _payload({"url": "https://b.example/x"}, inherited=PARENT) == {
        "url": "https://b.example/x",
        "proxy_pool": "res",
        "session": "site",
    }


def test_a_childs_own_pool_session_or_proxy_wins() -> None:
    own = {"url": "https://b.example/x", "proxy_pool": "dc"}
    assert _payload(own, inherited=PARENT) == own
    session = {"url": "https://b.example/x", "session": "acct-1"}
    assert _payload(session, inherited=PARENT)["session"] == "acct-1"
    pinned = {"url": "https://b.example/x", "proxy": "http://10.0.0.1:3128"}
    assert _payload(pinned, inherited=PARENT) == pinned


def test_the_parents_leased_proxy_is_taken_out_and_the_pool_put_back() -> None:
    carried = {"url": "https://b.example/x", "proxy": LEASED}
    payload = _payload(carried, inherited=PARENT, leased_proxy=LEASED)
    assert "proxy" not in payload and payload["proxy_pool"] == "res"
    assert "pw-secret" not in str(payload)


def test_without_a_parents_pool_nothing_is_added() -> None:
    plain = {"url": "https://b.example/x"}
    assert _payload(plain) == plain
    assert _payload(plain, inherited={"proxy_pool": None}) == plain


def test_a_child_naming_a_pool_and_its_own_proxy_is_refused_naming_the_field() -> None:
    both = {"url": "https://b.example/x", "proxy_pool": "res", "proxy": "http://10.0.0.1:1"}
    with pytest.raises(SpawnError, match=r"spawn\[0\]\.payload\.proxy_pool"):
        _payload(both)
