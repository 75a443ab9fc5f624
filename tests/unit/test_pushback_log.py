"""The producer's push-back warnings: one line per key per window, the rest counted into the
next line, never lost; and a key with no limit is said to be paused, never "slowed"."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from scrapefleet.common.jobs.rate_limits import Slowdown
from scrapefleet.producer.assigning.pushback_log import PushBackLog, pushback_line

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_a_storm_of_push_backs_is_one_line_then_one_summary_per_window() -> None:
    """2-5 push-backs within 50 ms every ~3 s for one key was 129 of 147 producer lines."""
    log = PushBackLog(every_s=60.0)
    lines = []
    for burst in range(40):  # 40 bursts 3 s apart, 3 push-backs each 10 ms apart: 120 s
        for n in range(3):
            now = _at(burst * 3 + n * 0.01)
            lines += [(now, k, c) for k, c in log.note("shop.test", 1, now)]
            lines += [(now, k, c) for k, c in log.due(now)]
    lines += [(_at(400), k, c) for k, c in log.due(_at(400))]
    # The first at once, then at most one a minute; the count adds up to every push-back.
    assert lines[0][2] == 1
    assert len(lines) <= 4 and sum(c for _, _, c in lines) == 120
    gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(lines)]
    assert all(g >= 60 for g in gaps)


def test_keys_are_counted_apart_and_forgotten_once_quiet() -> None:
    log = PushBackLog(every_s=60.0)
    assert log.note("a", 2, NOW) == [("a", 2)]
    assert log.note("b", 1, NOW) == [("b", 1)]
    assert log.note("a", 1, _at(1)) == []
    assert log.due(_at(61)) == [("a", 1)]
    assert log.due(_at(200)) == []
    assert log.note("a", 1, _at(201)) == [("a", 1)]  # quiet for a window: at once again
    assert log.tracked <= 2


def test_a_key_with_no_limit_is_paused_not_slowed() -> None:
    paused = Slowdown(0.0625, _at(30))
    line = pushback_line("free.test", 4, paused, limited=False)
    assert "slowed" not in line and "0.0625" not in line
    assert (
        line == "rate key free.test pushed back 4 time(s): paused until 12:00:30 (no limit to slow)"
    )
    limited = pushback_line("calm.test", 1, Slowdown(0.5, None), limited=True)
    assert limited == "rate key calm.test pushed back 1 time(s): its limits slowed to 0.5x"


def test_rate_limits_says_a_key_with_no_limit_is_paused_not_slowed() -> None:
    from scrapefleet.common.ops.commands.rate_limits_command import held_by

    row = {
        "paused_until": None,
        "factor": 0.0625,
        "concurrency_limit": None,
        "per_minute_limit": None,
        "in_flight": 0,
        "started_last_minute": 0,
    }
    assert "slowed" not in held_by(row, NOW)
    row["concurrency_limit"] = 4
    assert held_by(row, NOW).startswith("slowed to 0.0625x")
