"""Every field of a status document is bounded: nothing a host reports can be a value the
producer's health write would have the database refuse (which would cost that host a probe)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import parse_status
from tests.host_status_factory import status_for

pytestmark = pytest.mark.timeout(10)


def _document(**fields: Any) -> str:
    return json.dumps({**json.loads(status_for("h1").to_json()), **fields})


# A fixed uuid: test ids must be the same in every pytest-xdist worker's collection.
KERNEL_BOOT_ID = "444121d2-697e-4594-8477-c6026d1b194a"


@pytest.mark.parametrize("boot_id", [KERNEL_BOOT_ID, "boot-1", "unknown", "a" * 64])
def test_boot_ids_as_kernels_and_tests_write_them_parse(boot_id: str) -> None:
    assert parse_status(_document(boot_id=boot_id)).boot_id == boot_id


@pytest.mark.parametrize("boot_id", ["", "a" * 65, "a b", "../x", "-x", "é", 7, None])
def test_anything_else_is_not_a_boot_id(boot_id: object) -> None:
    with pytest.raises(ProbeError, match="'boot_id'"):
        parse_status(_document(boot_id=boot_id))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("host", ""),
        ("host", "h" * 256),
        ("load_1m", -1),
        ("load_1m", 1e7),
        ("updated_at", -1),
        ("updated_at", 1e12),
        ("browser_retry_at", 1e300),  # past timestamptz: refused by the database otherwise
        ("browser_retry_at", -5),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ProbeError, match=f"'{field}'"):
        parse_status(_document(**{field: value}))


@pytest.mark.parametrize("stuck", [-1, 100_001, True, 1.5, "2"])
def test_stuck_is_a_bounded_count(stuck: object) -> None:
    with pytest.raises(ProbeError, match="'stuck'"):
        parse_status(_document(stuck=stuck))


def test_a_document_without_stuck_parses_as_an_older_consumers() -> None:
    document = json.loads(_document(stuck=3))
    assert parse_status(json.dumps(document)).stuck == 3
    del document["stuck"]
    assert parse_status(json.dumps(document)).stuck is None


def test_the_browser_limit_and_its_reason_parse_and_are_bounded() -> None:
    why = "taking 2 of 6 browser jobs: CPU pressure 91% in 8 of the last 10 samples"
    parsed = parse_status(_document(browser_limit=2, browser_limit_reason=why))
    assert (parsed.browser_limit, parsed.browser_limit_reason) == (2, why)
    older = parse_status(_document(browser_limit=None, browser_limit_reason=None))
    assert older.browser_limit is None
    for limit in (-1, 100_001, 2.5, True, "2"):
        with pytest.raises(ProbeError, match="'browser_limit'"):
            parse_status(_document(browser_limit=limit))
    with pytest.raises(ProbeError, match="'browser_limit_reason'"):
        parse_status(_document(browser_limit=2, browser_limit_reason="x" * 501))


def test_the_kinds_a_host_runs_parse_with_their_versions_and_are_bounded() -> None:
    kinds = {"noop": "0.1.0", "prices": "2.3.1", "local_thing": None}
    assert parse_status(_document(kinds=kinds)).kinds == kinds
    assert parse_status(_document(kinds=None)).kinds is None  # an older consumer: any kind
    many = {f"k{i}": None for i in range(1_001)}
    for bad in (["noop"], "noop", many, {"": None}, {"a b ": None}, {"x" * 101: None}):
        with pytest.raises(ProbeError, match="'kinds'"):
            parse_status(_document(kinds=bad))
    for version in (1, "v" * 65, "1.0\n", ["1"]):
        with pytest.raises(ProbeError, match="'kinds': gives 'noop' the version"):
            parse_status(_document(kinds={"noop": version}))
