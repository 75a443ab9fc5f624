"""The SSH probe's answer: the host's clock line, then the status document; its age judged on
that clock; an older forced command's answer (the document alone) still read."""

from __future__ import annotations

import shlex

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.answer import (
    MAX_ANSWER_BYTES,
    parse_status_answer,
    stale_reason,
    status_answer_command,
)
from scrapefleet.common.status.document import MAX_STATUS_BYTES
from tests.host_status_factory import status_for

pytestmark = pytest.mark.timeout(10)

HOUR_S = 3600.0


def test_the_clock_line_and_the_document_are_split() -> None:
    status = status_for("h1", updated_at=1_000_000.5)
    answer = parse_status_answer(b"1000002\n" + status.to_json().encode())
    assert answer.host_clock == 1_000_002.0
    assert answer.status == status


def test_an_answer_without_a_clock_is_an_older_commands_document() -> None:
    status = status_for("h1")
    answer = parse_status_answer(status.to_json().encode() + b"\n")
    assert answer.host_clock is None and answer.status == status


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (b"", "empty status output"),
        (b"1795723051\n", "empty status output"),  # date ran, cat printed nothing
        (b"1795723051\nnot json", "status is not JSON"),
        (b"1234567890123\n{}", "status is not JSON"),  # 13 digits: not a clock line
        (b"17957x\n{}", "status is not JSON"),
        (b"1795723051\n" + b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
        (b'1795723051\n{"host": "\xff"}', "status is not UTF-8"),
        (b"1795723051\n" + b" " * MAX_STATUS_BYTES + b"{}", "larger than"),
    ],
)
def test_a_bad_answer_is_a_probe_error_naming_the_defect(output: bytes, expected: str) -> None:
    with pytest.raises(ProbeError, match=expected):
        parse_status_answer(output)


def test_the_read_cap_holds_the_longest_clock_line_and_a_document_of_the_largest_size() -> None:
    document = status_for("h1").to_json()
    largest = b"999999999999\n" + document.rjust(MAX_STATUS_BYTES).encode()
    assert len(largest) == MAX_ANSWER_BYTES
    assert parse_status_answer(largest).status.host == "h1"


def test_age_is_judged_on_the_hosts_own_clock() -> None:
    # A host an hour behind the producer wrote its document a second ago by its own clock.
    behind = status_for("h1", updated_at=1_000_000.0 - HOUR_S)
    assert stale_reason(behind, now=1_000_001.0 - HOUR_S, stale_after_s=15) is None
    # A dead host: its clock moved on, the document did not.
    old = status_for("h1", updated_at=1_000_000.0)
    assert stale_reason(old, now=1_000_060.0, stale_after_s=15) == (
        "status is 60 s old: consumer not running?"
    )


def test_the_command_quotes_the_path_for_the_shell() -> None:
    command = status_answer_command("/var/lib/scrape fleet/hosts/h1/status.json")
    assert command == "date +%s && exec cat '/var/lib/scrape fleet/hosts/h1/status.json'"
    assert shlex.split(command)[-1] == "/var/lib/scrape fleet/hosts/h1/status.json"
    assert '"' not in command  # it sits inside command="..." in authorized_keys
