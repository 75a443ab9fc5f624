from datetime import UTC, datetime, timedelta

import pytest

from scrapefleet.common.ops.dashboard.ages import relative_age

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset_s", "expected"),
    [
        (0, "just now"),
        (-4, "just now"),
        (42, "42 s ago"),
        (59, "59 s ago"),
        (60, "1 min ago"),
        (3_599, "59 min ago"),
        (3 * 3_600 + 1_000, "3 h ago"),
        (2 * 86_400 + 5, "2 d ago"),
        (-300, "in 5 min"),
        (-90_000, "in 1 d"),
    ],
)
def test_relative_age_picks_the_largest_whole_unit(offset_s: int, expected: str) -> None:
    assert relative_age(NOW - timedelta(seconds=offset_s), NOW) == expected
