"""The producer's assignment line: one summary a minute, nothing when nothing was assigned."""

from __future__ import annotations

import pytest

from scrapefleet.producer.assigning.assignment_report import AssignmentTally

pytestmark = pytest.mark.timeout(10)


def test_cycles_add_up_into_one_line_a_minute() -> None:
    tally = AssignmentTally(every_s=60)
    said = [tally.add(["h1", "h2", "h1"] if t % 4 == 0 else [], float(t)) for t in range(0, 60, 2)]
    assert said == [None] * 30  # a minute has not passed since the first assignment
    line = tally.add(["h2"], 60.0)
    assert line == "assigned jobs=46 in 60 s (16 cycles) hosts=h1:30,h2:16"
    assert tally.add([], 61.0) is None  # the tally starts again


def test_nothing_assigned_nothing_said() -> None:
    tally = AssignmentTally(every_s=60)
    assert all(tally.add([], float(t)) is None for t in range(0, 600, 2))


def test_a_lone_assignment_is_said_at_the_first_cycle_after_the_minute() -> None:
    tally = AssignmentTally(every_s=60)
    assert tally.add(["h1"], 100.0) is None
    assert tally.add([], 130.0) is None
    assert tally.add([], 161.0) == "assigned jobs=1 in 61 s (1 cycles) hosts=h1:1"
