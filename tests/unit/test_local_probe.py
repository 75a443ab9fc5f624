"""The producer's probe of consumers on its own machine: their status files under its
state_dir, and a missing file explained (the usual mistake: two different state_dirs)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import (
    MAX_STATUS_BYTES,
    HostStatus,
    status_path,
    write_status,
)
from scrapefleet.producer.probes.local_probe import HostTarget, LocalProbe
from tests.host_status_factory import status_for
from tests.waiting import scaled

pytestmark = pytest.mark.timeout(10)


def test_a_missing_status_file_names_the_path_and_the_state_dir(tmp_path: Path) -> None:
    result = LocalProbe(tmp_path, stale_after_s=30).probe_all([HostTarget("h1", None)])["h1"]
    assert isinstance(result, ProbeError)
    expected = tmp_path / "hosts" / "h1" / "status.json"
    assert str(result) == (
        f"no status file at {expected}: is its consumer running, with this producer's"
        f" state_dir ({tmp_path})?"
    )


def test_a_fresh_status_file_is_read_and_a_stale_one_is_a_failure(tmp_path: Path) -> None:
    write_status(tmp_path, status_for("h1"))
    write_status(tmp_path, status_for("h2", updated_at=1.0))
    results = LocalProbe(tmp_path, stale_after_s=30).probe_all(
        [HostTarget("h1", None), HostTarget("h2", None)]
    )
    assert not isinstance(results["h1"], ProbeError) and results["h1"].host == "h1"
    assert isinstance(results["h2"], ProbeError) and "consumer not running?" in str(results["h2"])


# -- a hostile status file costs its own host alone ------------------------------------------
# The consumer user writes its host's directory: whatever it leaves there is read by the
# producer. Every case below probes h1 (poisoned) beside h2 (healthy) in one round.

NESTED_DEPTH = 30_000  # past the JSON decoder's recursion limit, within the size cap


def _probe_beside_a_healthy_host(state_dir: Path) -> dict[str, HostStatus | ProbeError]:
    write_status(state_dir, status_for("h2"))
    targets = [HostTarget("h1", None), HostTarget("h2", None)]
    results = LocalProbe(state_dir, stale_after_s=30).probe_all(targets)
    assert isinstance(results["h2"], HostStatus), results["h2"]
    return results


def _failure(result: HostStatus | ProbeError) -> str:
    assert isinstance(result, ProbeError), f"expected a failed probe, got {result}"
    return str(result)


def test_a_deeply_nested_document_fails_its_host_alone(tmp_path: Path) -> None:
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    path.write_text("[" * NESTED_DEPTH + "]" * NESTED_DEPTH)
    assert "nested too deeply" in _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])


def test_a_number_too_long_to_convert_fails_its_host_alone(tmp_path: Path) -> None:
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1' + "0" * 6000 + "}")  # past int()'s digit limit
    assert "status is not JSON" in _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])


def test_a_document_that_is_not_utf8_fails_its_host_alone(tmp_path: Path) -> None:
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"host": "\xff"}')
    assert "not UTF-8" in _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])


def test_a_fifo_in_place_of_the_file_is_refused_without_waiting(tmp_path: Path) -> None:
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    outcome: list[dict[str, HostStatus | ProbeError]] = []
    prober = threading.Thread(
        target=lambda: outcome.append(_probe_beside_a_healthy_host(tmp_path)), daemon=True
    )
    prober.start()
    prober.join(scaled(5))
    if prober.is_alive():
        # Release the blocked open (a writer arrives), so the thread ends with the test.
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        prober.join(scaled(5))
        pytest.fail("the probe waited on a FIFO (no writer) instead of refusing it")
    assert "not a regular file (a FIFO)" in _failure(outcome[0]["h1"])


def test_a_symlink_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    # A valid document elsewhere: a link must not be followed even to one that parses.
    elsewhere = tmp_path / "elsewhere"
    write_status(elsewhere, status_for("h1"))
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    path.symlink_to(status_path(elsewhere, "h1"))
    assert "is a symbolic link" in _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])


def test_a_symlinked_host_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    write_status(elsewhere, status_for("h1"))
    (tmp_path / "hosts").mkdir()
    status_path(tmp_path, "h1").parent.symlink_to(status_path(elsewhere, "h1").parent)
    assert "is a symbolic link" in _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])


def test_a_device_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: endless
    assert "not a regular file (a character device)" in _failure(
        _probe_beside_a_healthy_host(tmp_path)["h1"]
    )


def test_an_oversized_file_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    path = status_path(tmp_path, "h1")
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:  # sparse: 16 MiB of nothing, on no disk
        handle.truncate(16 << 20)
    assert f"larger than {MAX_STATUS_BYTES} bytes" in _failure(
        _probe_beside_a_healthy_host(tmp_path)["h1"]
    )


def test_an_unforeseen_error_in_one_document_fails_that_host_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scrapefleet.producer.probes import local_probe as probe_module

    real_parse = probe_module.parse_status

    def parse_or_break(text: str) -> HostStatus:
        if '"h1"' in text:
            raise KeyError("a bug in the parser")
        return real_parse(text)

    monkeypatch.setattr(probe_module, "parse_status", parse_or_break)
    write_status(tmp_path, status_for("h1"))
    failure = _failure(_probe_beside_a_healthy_host(tmp_path)["h1"])
    assert failure == "probe error: KeyError: 'a bug in the parser'"
