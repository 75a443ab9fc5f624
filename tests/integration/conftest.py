"""Fixtures shared by the integration tests (the database ones are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scrapefleet.producer.producer_daemon import Producer
from tests.integration.producer_helpers import producer_settings


@pytest.fixture
def make_producer(engine: Engine, database_url: str, tmp_path: Path) -> Iterator[Any]:
    """Build producers on the test database (settings overridable by keyword); every one is
    stopped at the end."""
    made: list[Producer] = []

    def make(**overrides: Any) -> Producer:
        producer = Producer(producer_settings(database_url, tmp_path, **overrides), engine)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.stop()
