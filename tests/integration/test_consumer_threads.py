"""Every side thread of a consumer is watched: when one dies, the consumer stops (cold), names
the thread in one log line, and its run returns the non-zero code `scrapefleet-consumer` exits
with (common.runtime.side_threads, docs/consumer-threads.md).

Each thread's loop is made to raise in turn, in a real consumer against a real database.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.common.db.engines import Listener, make_engine
from scrapefleet.common.runtime.serial_thread import SerialThread
from scrapefleet.common.status.document import read_status
from scrapefleet.consumer.browser.actions.artifact_janitor import ArtifactJanitor
from scrapefleet.consumer.daemon import Consumer
from scrapefleet.consumer.heartbeat import Heartbeat
from scrapefleet.consumer.recorder import OutcomeRecorder
from tests.integration.test_consumer import HOST, host_row, make_settings, wait_started
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _injected(*_: Any, **__: Any) -> Any:
    raise RuntimeError("injected failure")


# thread name -> (the class whose loop raises, the method), and whether it needs a stack
LOOPS: dict[str, tuple[type, str, bool]] = {
    f"heartbeat-{HOST}": (Heartbeat, "_heartbeat_once", False),
    f"listen-{HOST}": (Listener, "wait", False),
    f"recorder-{HOST}": (OutcomeRecorder, "_run", False),
    "artifact-janitor": (ArtifactJanitor, "prune_once", False),
    f"stack-{HOST}": (SerialThread, "_serve", True),
}


@pytest.mark.parametrize("thread_name", list(LOOPS))
def test_a_dying_side_thread_stops_the_consumer_non_zero_and_names_it(
    thread_name: str,
    engine: Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner, method, needs_stack = LOOPS[thread_name]
    settings = make_settings(tmp_path, database_url, browser=needs_stack)
    monkeypatch.setattr(owner, method, _injected)
    consumer_engine = make_engine(
        database_url, pool_size=3, application_name=f"consumer-test-{uuid.uuid4().hex[:8]}"
    )
    consumer = Consumer(settings, consumer_engine, HOST)
    exit_codes: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            exit_codes.append(consumer.run())
        except BaseException as exc:
            errors.append(exc)

    caplog.set_level(logging.INFO)
    runner = threading.Thread(target=run, name="consumer-under-test", daemon=True)
    runner.start()
    try:
        wait_started(engine, settings)
        runner.join(scaled(15))
        stopped_itself = not runner.is_alive()
    finally:
        consumer.request_cold_stop("test over")
        runner.join(scaled(15))
        consumer_engine.dispose()
    assert stopped_itself, "the consumer kept running without its thread"
    assert not errors, errors
    assert exit_codes == [1], "a consumer that lost a thread exits non-zero"
    died = [
        r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "died" in r.msg
    ]
    assert died == [f"thread {thread_name} died: RuntimeError: injected failure; stopping the"
                    " consumer"], died  # fmt: skip
    stopped = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"consumer {HOST} stopped")
    ]
    assert stopped[-1].startswith(f"consumer {HOST} stopped (thread {thread_name} died"), stopped
    wait_for(lambda: host_row(engine).state == "offline", what="the host left offline")
    document = read_status(settings.state_dir, HOST)
    assert document.daemon == "stopped"
