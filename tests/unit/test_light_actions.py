"""Which jobs a consumer runs in its claiming thread: an action's ``light``
(common.actions.registry)."""

from __future__ import annotations

from typing import Any

import pytest

from scrapefleet.common.actions.registry import Action, FreeParams, get_action, register


def _action(light: Any) -> Action:
    return Action("a", lambda params: {}, FreeParams, light=light)


def test_light_is_a_flag_or_a_function_of_the_payload() -> None:
    assert _action(True).is_light({}) is True
    assert _action(False).is_light({}) is False
    by_size = _action(lambda payload: payload["n"] < 10)
    assert by_size.is_light({"n": 3}) is True
    assert by_size.is_light({"n": 30}) is False


def test_a_payload_the_function_cannot_read_is_not_light() -> None:
    by_size = _action(lambda payload: payload["n"] < 10)
    assert by_size.is_light({}) is False  # KeyError: the worker thread reports the payload
    assert by_size.is_light(["n"]) is False  # not an object
    assert by_size.is_light({"n": "3"}) is False  # TypeError


def test_noop_is_light_unless_it_sleeps() -> None:
    noop = get_action("noop")
    assert noop.is_light({}) and noop.is_light({"sleep_s": 0}) and noop.is_light({"fail": True})
    assert not noop.is_light({"sleep_s": 0.5})
    assert not get_action("http_get").is_light({"url": "http://127.0.0.1/"})


def test_a_browser_action_cannot_be_light() -> None:
    with pytest.raises(ValueError, match="'test_light_browser': a browser action cannot be light"):
        register("test_light_browser", needs_browser=True, light=True)


def test_only_a_users_light_action_is_warned_about_when_slow() -> None:
    """A built-in light job that took long was starved (the claiming thread's CPU), not waiting;
    the warning "an action that waits must not be light" is for the user's own actions."""
    from scrapefleet.consumer.serving import _built_in

    register("test_light_user_action", light=True)(lambda params: {})
    assert _built_in("noop")
    assert not _built_in("test_light_user_action")
