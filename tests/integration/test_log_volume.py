"""What a real producer and consumer write at INFO over a run of a few hundred jobs: the
consumer one line per finished attempt (its fields and its reason), the producer a handful of
lines whatever its cycles. The full 1,000-job count is tests/benchmarks/bench_log_lines.py
(figures in docs/how-to/operations.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.benchmarks.bench_log_lines import run
from tests.waiting import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

JOBS, FAILING = 300, 10  # the failing ones fail twice: a retry, then failed for good
FEW = 10  # start, lead, stop: lines that come once a process, never per job or per cycle


def test_log_lines_stay_bounded_over_hundreds_of_jobs(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """``engine``: the database emptied first (the counts are of every job and attempt)."""
    result = run(database_url, tmp_path, JOBS, FAILING, timeout_s=scaled(60), idle_s=1.0)
    assert result.attempts == JOBS + 2 * FAILING

    # The producer: nothing per cycle, though it ran hundreds of them.
    cycles = sum(result.cycles.values())
    assert cycles >= 20, result.cycles
    producer = result.producer.records
    assert len(producer) <= FEW, [r["msg"] for r in producer]

    # The consumer: one line per finished attempt, carrying its fields, and a few more.
    attempts = result.consumer.attempts
    assert len(attempts) == result.attempts
    assert all({"job", "kind", "host", "outcome"} <= set(r) for r in attempts)
    outcomes = Counter((r["outcome"], r["level"]) for r in attempts)
    assert outcomes == {
        ("completed", "INFO"): JOBS,
        ("retry", "INFO"): FAILING,
        ("failed", "WARNING"): FAILING,
    }
    assert all(
        r.get("reason") == "RuntimeError: noop asked to fail"
        for r in attempts
        if r["outcome"] != "completed"
    )
    others = result.consumer.others
    assert len(others) <= FEW, [r["msg"] for r in others]
    everything = result.producer.records + result.consumer.records
    assert not [r for r in everything if "HTTP Request" in str(r.get("msg"))]
