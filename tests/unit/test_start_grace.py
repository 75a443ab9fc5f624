"""The producer's start-up grace: which failed probes are recorded (producer.probes.start_grace)."""

from __future__ import annotations

from scrapefleet.common.errors import ProbeError
from scrapefleet.producer.probes.start_grace import StartGrace
from tests.host_status_factory import status_for

FAILED = ProbeError("no status file")


def test_before_the_lead_and_after_the_grace_every_failure_counts() -> None:
    grace = StartGrace(30)
    assert grace.counted({"h1": FAILED}, 0.0) == ({"h1": FAILED}, [])
    grace.lead_taken(100.0)
    assert grace.counted({"h1": FAILED}, 130.0) == ({"h1": FAILED}, [])


def test_within_the_grace_a_host_that_never_answered_is_held_back() -> None:
    grace = StartGrace(30)
    grace.lead_taken(100.0)
    ok = status_for("h2")
    counted, held = grace.counted({"h1": FAILED, "h2": ok}, 100.5)
    assert counted == {"h2": ok} and held == ["h1"]
    assert grace.counted({"h1": FAILED}, 129.9)[1] == ["h1"]


def test_a_host_that_answered_once_is_counted_at_once() -> None:
    grace = StartGrace(30)
    grace.lead_taken(0.0)
    grace.counted({"h1": status_for("h1")}, 1.0)
    assert grace.counted({"h1": FAILED}, 2.0) == ({"h1": FAILED}, [])
    grace.lead_taken(50.0)  # a lead lost and taken again: h1 is still known to answer
    assert grace.counted({"h1": FAILED}, 51.0) == ({"h1": FAILED}, [])


def test_a_grace_of_zero_holds_nothing() -> None:
    grace = StartGrace(0)
    grace.lead_taken(0.0)
    assert grace.counted({"h1": FAILED}, 0.0) == ({"h1": FAILED}, [])
