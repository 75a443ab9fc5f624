"""Selenium logs each BiDi message at DEBUG: a proxy's password in ``network.continueWithAuth``
is masked before any handler sees it, whole or cut short by Selenium's size bound."""

from __future__ import annotations

import json
import logging

import pytest

from scrapefleet.consumer.browser.sessions.bidi import WEBSOCKET_LOGGER

SECRET = 's3cret-\\"pw'


@pytest.mark.parametrize("cut_inside", [False, True])
def test_a_password_sent_on_the_websocket_is_masked_in_its_log_line(
    caplog: pytest.LogCaptureFixture, cut_inside: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    message = json.dumps(
        {
            "method": "network.continueWithAuth",
            "params": {
                "request": "64E9",
                "action": "provideCredentials",
                "credentials": {"type": "password", "username": "u1", "password": SECRET},
            },
            "id": 22,
        }
    )
    line = f"-> {message}"
    if cut_inside:  # Selenium's bound ends the line within the password
        line = line[: line.index("s3cret") + 4]
    logging.getLogger(WEBSOCKET_LOGGER).debug(line)
    (record,) = [r for r in caplog.records if r.name == WEBSOCKET_LOGGER]
    text = record.getMessage()
    assert "s3cr" not in text and '"password": "***' in text
    assert '"username": "u1"' in text  # only the password goes
