"""The producer's probe of consumers on its own machine: their status files under its
state_dir, and a missing file explained (the usual mistake: two different state_dirs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.host_status import write_status
from scrapefleet.producer.probe import HostTarget, LocalProbe
from tests.host_status_factory import status_for

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
