"""The claim schedule of a consumer without a LISTEN connection (consumer.poll_schedule)."""

from __future__ import annotations

import pytest

from scrapefleet.consumer.poll_schedule import REFILL_FIRST_S, PollSchedule

POLL_S = 1.0


def test_the_first_claim_is_at_once_then_every_poll() -> None:
    schedule = PollSchedule(POLL_S)
    assert schedule.claim_due_in(10.0) == 0
    schedule.claim_started()
    assert schedule.claim_due_in(10.0) == float("inf")  # set when it ends
    schedule.claimed(10.0, 10.0, 0)
    assert schedule.claim_due_in(10.0) == POLL_S
    schedule.claimed(11.0, 11.0, 3)  # work found on a plain poll: the plain poll goes on
    assert schedule.claim_due_in(11.0) == POLL_S


def test_a_freed_slot_is_claimed_soon_then_less_and_less_often() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.claimed(0.0, 0.0, 1)
    schedule.slot_freed(0.3, more_queued=False)
    assert schedule.claim_due_in(0.3) == pytest.approx(REFILL_FIRST_S)
    waits = []
    now = 0.3 + REFILL_FIRST_S
    for _ in range(10):  # the producer never refills it
        schedule.claimed(now, now, 0)
        waits.append(schedule.claim_due_in(now))
        now += waits[-1]
    steps = [REFILL_FIRST_S * 2**k for k in range(1, 5)]  # 0.1, 0.2, 0.4, 0.8
    assert waits[:4] == pytest.approx(steps)
    assert waits[4:] == pytest.approx([POLL_S] * 6)  # back to the plain poll


def test_a_refill_found_ends_the_refill() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.slot_freed(5.0, more_queued=False)
    schedule.claimed(5.05, 5.06, 2)
    assert schedule.claim_due_in(5.06) == POLL_S


def test_more_queued_is_claimed_at_once() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.claimed(0.0, 0.0, 6)
    schedule.slot_freed(0.5, more_queued=True)
    assert schedule.claim_due_in(0.5) == 0


def test_slots_freed_during_a_claim_keep_their_refill() -> None:
    """Light jobs end inside the claim that took them: the refill stands."""
    schedule = PollSchedule(POLL_S)
    schedule.claim_started()
    schedule.slot_freed(2.001, more_queued=False)  # during the claim started at 2.0
    schedule.claimed(2.0, 2.002, 4)
    assert schedule.claim_due_in(2.002) == pytest.approx(2.001 + REFILL_FIRST_S - 2.002)


def test_a_slot_freed_never_postpones_a_claim_already_due() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.claimed(0.0, 0.0, 0)
    schedule.slot_freed(0.99, more_queued=False)  # the plain poll is due at 1.0
    assert schedule.claim_due_in(0.99) == pytest.approx(0.01)


def test_a_claim_that_failed_is_tried_again_on_the_next_pass() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.claim_started()
    schedule.claim_now(3.0)
    assert schedule.claim_due_in(3.0) == 0


def test_claim_now_brings_the_next_claim_forward_never_back() -> None:
    schedule = PollSchedule(POLL_S)
    schedule.claimed(0.0, 0.0, 0)  # the next plain poll at 1.0
    schedule.claim_now(0.4)  # the host became active again
    assert schedule.claim_due_in(0.4) == 0
    schedule.claimed(0.4, 0.4, 0)
    schedule.slot_freed(0.5, more_queued=False)  # a refill due at 0.55
    schedule.claim_now(0.6)
    assert schedule.claim_due_in(0.5) == pytest.approx(REFILL_FIRST_S)
