"""An operator's retry and cancel, decided and explained (common/ops/bulk.py): no database."""

from __future__ import annotations

import pytest

from scrapefleet.common.ops import bulk
from scrapefleet.common.ops.bulk import Go
from scrapefleet.common.store import JobFilter

pytestmark = pytest.mark.timeout(30)


def test_retry_moves_failed_jobs_only_unless_cancelled_ones_are_asked_for() -> None:
    assert bulk.movable(bulk.RETRY) == ("failed",)
    assert bulk.movable(bulk.RETRY, include_cancelled=True) == ("failed", "cancelled")
    assert bulk.movable(bulk.CANCEL) == ("pending", "queued")
    with pytest.raises(ValueError, match="retry or cancel"):
        bulk.movable("delete")


def test_would_move_counts_only_the_statuses_it_moves() -> None:
    matched = {"failed": 3, "cancelled": 19_201, "completed": 5}
    assert bulk.would_move(matched, bulk.movable(bulk.RETRY)) == 3
    assert bulk.would_move(matched, bulk.movable(bulk.RETRY, True)) == 19_204


@pytest.mark.parametrize(
    ("count", "yes", "dry_run", "interactive", "expected"),
    [
        (100, False, False, False, Go.ACT),  # at the threshold: no question
        (101, False, False, True, Go.ASK),
        (101, False, False, False, Go.REFUSE),  # nobody to ask, and no --yes
        (50_000, True, False, False, Go.ACT),
        (50_000, True, True, True, Go.COUNT_ONLY),  # --dry-run wins over --yes
        (1, False, True, False, Go.COUNT_ONLY),
    ],
)
def test_decide(count: int, yes: bool, dry_run: bool, interactive: bool, expected: Go) -> None:
    assert bulk.decide(count, yes=yes, dry_run=dry_run, interactive=interactive) is expected


def test_nothing_matched_names_the_reason() -> None:
    nosuch = JobFilter(host="nosuch")
    assert (
        bulk.nothing_matched(bulk.CANCEL, nosuch, {}, host_known=False)
        == "no host named 'nosuch', and no job names it"
    )
    assert bulk.nothing_matched(bulk.CANCEL, JobFilter(kind="x"), {}) == "no job matches kind 'x'"
    running = bulk.nothing_matched(bulk.CANCEL, JobFilter(host="h1"), {"processing": 2})
    assert running.startswith("nothing to cancel: the 2 job(s) matching host 'h1' are 2 processing")
    assert "`jobs stop` ends a running one" in running
    cancelled = bulk.nothing_matched(
        bulk.RETRY, JobFilter(kind="noop"), {"cancelled": 50_000, "completed": 3}
    )
    assert "are 3 completed, 50,000 cancelled" in cancelled
    assert "--include-cancelled retries cancelled ones too" in cancelled
    assert "\n" not in cancelled


def test_unmoved_ids_says_which_and_why_in_one_line() -> None:
    assert bulk.unmoved_ids(bulk.RETRY, [1, 2], [1, 2], {}) is None
    line = bulk.unmoved_ids(
        bulk.RETRY, [4, 5, 6, 7, 4], [4], {5: "completed", 6: "cancelled"}, include_cancelled=False
    )
    assert line == (
        "3 of 4 job(s) not retried: job 5 is completed; job 6 is cancelled; job 7 does not exist"
        " (only failed jobs are retried; --include-cancelled retries cancelled ones too)"
    )
    running = bulk.unmoved_ids(bulk.CANCEL, [9, 10], [], {9: "processing", 10: "processing"})
    assert running is not None and running.startswith("2 of 2 job(s) not cancelled: jobs 9, 10 are")


def test_a_long_list_of_ids_is_cut() -> None:
    ids = list(range(1, 1001))
    line = bulk.unmoved_ids(bulk.CANCEL, ids, [], {})
    assert (
        line is not None and "jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 990 more do not exist" in line
    )
    assert bulk.describe(JobFilter(ids=ids, kind="k")) == (
        "jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 990 more, kind 'k'"
    )
