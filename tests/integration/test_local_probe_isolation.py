"""A hostile status file of one local host costs that host alone: the producer's real cycle over
three local hosts, one of whose files is a deeply nested document, a FIFO, a symlink (to a
document, or to /dev/zero), a 50 MB file or a directory, keeps
the other two active and assigned, and returns within its round (never waits on the FIFO)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.status.document import status_path
from scrapefleet.common.store import NewJob
from scrapefleet.producer.producer_cycle import CycleReport
from tests.integration.producer_helpers import add_hosts, publish_status, submit
from tests.waiting import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NESTED_DEPTH = 30_000  # past the JSON decoder's recursion limit, within the size cap


def _nested(path: Path) -> str:
    path.write_text("[" * NESTED_DEPTH + "]" * NESTED_DEPTH)
    return "nested too deeply"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "not a regular file (a FIFO)"


def _symlink(path: Path) -> str:
    # To a valid document of the same host: the link itself is the defect.
    elsewhere = path.with_name("elsewhere.json")
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    return "is a symbolic link"


def _zero_link(path: Path) -> str:
    path.symlink_to("/dev/zero")  # endless: read without a cap, it would never end
    return "is a symbolic link"


def _huge(path: Path) -> str:
    with path.open("wb") as out:  # 50 MB: a status is ~450 bytes
        out.truncate(50 * 1024 * 1024)
    return "larger than"


def _directory(path: Path) -> str:
    path.mkdir()
    return "not a regular file (a directory)"


POISONS: dict[str, Callable[[Path], str]] = {
    "nested": _nested,
    "fifo": _fifo,
    "symlink": _symlink,
    "zero_link": _zero_link,
    "huge": _huge,
    "directory": _directory,
}


def _run_cycle_bounded(run: Callable[[], CycleReport], path: Path) -> CycleReport:
    """One cycle in a thread: if it blocks (on the FIFO), a writer is opened to release it and
    the test fails instead of hanging."""
    outcome: list[CycleReport | BaseException] = []

    def cycle() -> None:
        try:
            outcome.append(run())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    thread.join(scaled(10))
    if thread.is_alive():
        if path.is_fifo():
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(scaled(10))
        pytest.fail("the producer's cycle blocked on one host's status file")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_one_hostile_status_file_leaves_the_other_local_hosts_active(
    engine: Engine, tmp_path: Path, make_producer: Any, poison: str
) -> None:
    add_hosts(engine, {"h1": 2, "h2": 2, "h3": 2})
    for name in ("h1", "h2", "h3"):
        publish_status(tmp_path, name)
    producer = make_producer(probe_failures_offline=1)
    first = _run_cycle_bounded(producer.run_cycle, status_path(tmp_path, "h1"))
    assert first.error is None

    path = status_path(tmp_path, "h1")
    if poison != "symlink":
        path.unlink()
    expected = POISONS[poison](path)
    for name in ("h2", "h3"):
        publish_status(tmp_path, name)
    ids = submit(engine, [NewJob("noop") for _ in range(6)])
    report = _run_cycle_bounded(producer.run_cycle, path)

    assert report.error is None
    with engine.connect() as conn:
        hosts = {
            r.name: r
            for r in conn.execute(sa.text("SELECT name, state, last_probe_error FROM hosts"))
        }
        assigned = dict(
            conn.execute(
                sa.text(
                    "SELECT host, count(*) FROM jobs WHERE id = ANY(:ids) AND host IS NOT NULL"
                    " GROUP BY host"
                ),
                {"ids": ids},
            ).all()
        )
    assert hosts["h1"].state == "offline"
    assert expected in hosts["h1"].last_probe_error
    assert {hosts[n].state for n in ("h2", "h3")} == {"active"}
    assert assigned == {"h2": 2, "h3": 2}
