"""A consumer's start never shows the producer an active host without a readable status.

The producer's local probe reads the consumer's status document; a document older than
``local_state_stale_s`` is a failed probe, and enough of them make the host offline. A consumer
restarted after a while finds its last run's document on disk: if its host turned active in the
database before the new document was written, the producer could find it active and stale.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.status.document import read_status
from tests.integration.producer_helpers import publish_status
from tests.integration.test_consumer import HOST, consumer_thread, make_settings
from tests.waiting import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def _state(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT state FROM hosts WHERE name = :n"), {"n": HOST}
        ).scalar()


def test_the_host_is_active_only_once_its_status_is_fresh(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, database_url, capacity=2)
    with consumer_thread(settings, database_url):  # a first run, stopped: the host offline
        pass
    assert _state(engine) == "offline"
    # What the last run left on disk, as a restart a minute later finds it.
    publish_status(settings.state_dir, HOST, age_s=64)
    started = time.time()
    with consumer_thread(settings, database_url):
        deadline = time.monotonic() + scaled(10)
        while _state(engine) != "active":  # the first moment the database says active
            assert time.monotonic() < deadline, "the host never turned active"
        document = read_status(settings.state_dir, HOST)
        assert document.updated_at >= started, "active with the last run's document"
