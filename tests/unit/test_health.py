"""What the producer makes of a probe: the status document's validation, and the host state
after a probe (a pure decision)."""

from __future__ import annotations

import json

import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.document import (
    MAX_STATUS_CHARS,
    BrowserState,
    parse_status,
    takes_browser_jobs,
)
from scrapefleet.producer.probes.host_state_rule import next_host_state
from tests.host_status_factory import status_for

THRESHOLD = 3


@pytest.mark.parametrize("failures", [1, 2])
def test_fewer_failures_than_the_threshold_change_nothing(failures: int) -> None:
    assert next_host_state("active", False, failures, None, THRESHOLD) == "active"


@pytest.mark.parametrize("failures", [3, 4, 10])
def test_threshold_failures_make_a_host_offline(failures: int) -> None:
    assert next_host_state("active", False, failures, None, THRESHOLD) == "offline"


@pytest.mark.parametrize("state", ["restarting", "rebooting"])
def test_a_stack_or_reboot_that_never_returns_goes_offline(state: str) -> None:
    assert next_host_state(state, False, 3, None, THRESHOLD) == "offline"


def test_offline_stays_offline_while_failing() -> None:
    assert next_host_state("offline", False, 7, None, THRESHOLD) == "offline"


def test_success_brings_an_offline_host_back() -> None:
    assert next_host_state("offline", True, 0, "active", THRESHOLD) == "active"


def test_an_offline_host_still_restarting_stays_offline() -> None:
    assert next_host_state("offline", True, 0, "restarting", THRESHOLD) == "offline"


@pytest.mark.parametrize("state", ["draining", "disabled"])
@pytest.mark.parametrize("probe_ok", [True, False])
def test_operator_states_are_left_alone(state: str, probe_ok: bool) -> None:
    failures = 0 if probe_ok else 99
    reported = "active" if probe_ok else None
    assert next_host_state(state, probe_ok, failures, reported, THRESHOLD) == state


@pytest.mark.parametrize("state", ["active", "restarting", "rebooting"])
def test_success_leaves_consumer_managed_states(state: str) -> None:
    assert next_host_state(state, True, 0, "active", THRESHOLD) == state


# ---------------------------------------------------------------- the status document


def _document(**fields: object) -> dict[str, object]:
    return json.loads(status_for("h1").to_json()) | fields


@pytest.mark.parametrize("daemon", ["starting", "running", "draining", "stopped"])
def test_the_daemon_state_round_trips(daemon: str) -> None:
    assert parse_status(status_for("h1", daemon=daemon).to_json()).daemon == daemon


def test_a_document_from_before_the_daemon_field_still_parses() -> None:
    old = _document()
    del old["daemon"]
    status = parse_status(json.dumps(old))
    assert status.daemon is None and status.host == "h1" and status.state == "active"
    assert parse_status(json.dumps(_document(daemon=None))).daemon is None


@pytest.mark.parametrize("daemon", ["sleeping", "RUNNING", "", 1, True, ["running"], {"a": 1}])
def test_a_daemon_state_that_is_not_one_is_refused(daemon: object) -> None:
    with pytest.raises(ProbeError, match="'daemon'"):
        parse_status(json.dumps(_document(daemon=daemon)))


def test_a_huge_bad_value_is_quoted_short() -> None:
    with pytest.raises(ProbeError) as caught:
        parse_status(json.dumps(_document(daemon="x" * 10_000)))
    assert len(str(caught.value)) < 100


def test_an_oversized_document_is_refused_unread() -> None:
    padded = json.dumps(_document(padding="x" * MAX_STATUS_CHARS))
    with pytest.raises(ProbeError, match="larger than"):
        parse_status(padded)


@pytest.mark.parametrize(
    ("field", "value"),
    [("running", -1), ("capacity", "6"), ("state", "sleeping"), ("load_1m", True), ("host", 3)],
)
def test_the_other_fields_are_still_checked(field: str, value: object) -> None:
    with pytest.raises(ProbeError):
        parse_status(json.dumps(_document(**{field: value})))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_available_bytes", 2**63),  # would overflow bigint and abort every host's write
        ("running", 2**31),
        ("jobs_since_boot", 2**31),
        ("pid", 2**40),
        ("load_1m", 1e999),
    ],
)
def test_values_the_database_cannot_hold_are_refused(field: str, value: object) -> None:
    with pytest.raises(ProbeError, match=repr(field)):
        parse_status(json.dumps(_document(**{field: value})))


@pytest.mark.parametrize("browser", ["idle", "starting", "ready", "failing", "absent"])
def test_the_browser_capability_round_trips(browser: str) -> None:
    status = status_for("h1", browser=browser, browser_reason="no jar", browser_retry_at=5.0)
    parsed = parse_status(status.to_json())
    assert (parsed.browser, parsed.browser_reason, parsed.browser_retry_at) == (
        browser,
        "no jar",
        5.0,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("browser", "broken"),
        ("browser", 1),
        ("browser_reason", "x" * 501),
        ("browser_reason", 7),
        ("browser_retry_at", "soon"),
        ("browser_retry_at", float("nan")),
    ],
)
def test_bad_browser_fields_are_refused(field: str, value: object) -> None:
    with pytest.raises(ProbeError, match=f"'{field}'"):
        parse_status(json.dumps(_document(**{field: value})))


def test_which_browser_states_take_browser_jobs() -> None:
    taking = {s for s in BrowserState if takes_browser_jobs(s)}
    assert taking == {BrowserState.IDLE, BrowserState.STARTING, BrowserState.READY}
    assert takes_browser_jobs(None)  # a consumer from before the field started stacks on demand
