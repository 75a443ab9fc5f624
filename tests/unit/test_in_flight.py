"""The consumer's in-flight bookkeeping (consumer.in_flight): slots, attempts given up, and what
the database is owed for them, one step at a time."""

from __future__ import annotations

import math

from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.in_flight import InFlightAttempts


def _job(job_id: int, browser: bool = False, claim: int = 1) -> ClaimedJob:
    return ClaimedJob(job_id, "noop", {}, 1, 3, None, needs_browser=browser, claim=claim)


def _claim(attempts: InFlightAttempts, jobs: list[ClaimedJob], at: float = 0.0) -> int:
    def limit_s(job: ClaimedJob) -> float:
        return 10.0 if job.needs_browser else 20.0

    return attempts.claimed(jobs, at, limit_s, since_restart=5, since_boot=7, more=False)


def test_a_timed_out_attempt_keeps_its_slot_until_it_returns_and_its_failure_is_written() -> None:
    attempts = InFlightAttempts(since_restart=0, since_boot=0)
    slow, quick = _job(1, browser=True), _job(2)
    assert _claim(attempts, [slow, quick]) == 2
    room = attempts.room(capacity=4, unwritten=1)
    assert room is not None and (room.free, room.browser_busy) == (1, 1)
    assert (room.since_restart, room.since_boot) == (5, 7)
    assert attempts.room(capacity=3, unwritten=1) is None and attempts.more_queued
    assert attempts.soonest_deadline() == 10.0

    [expired] = attempts.expire(now=10.0)
    assert expired.job == slow and attempts.busy == 1 and attempts.stuck == 1
    assert attempts.running == 2, "its thread still runs: its slot is taken"
    room = attempts.room(capacity=4, unwritten=0)
    assert room is not None and room.running_here == [1]

    assert attempts.returned([quick, slow]) == ([quick], [slow])
    assert attempts.running == 0 and attempts.soonest_deadline() == math.inf
    assert attempts.take_ended() == [], "its failure is not written yet"
    assert attempts.outcomes_written([slow]), "written: its end may be confirmed now"
    assert attempts.take_ended() == [slow.key]
    attempts.put_back_ended([slow.key])  # the confirmation failed: kept for the next heartbeat
    assert attempts.take_ended() == [slow.key] and attempts.take_ended() == []


def test_a_lapsed_lease_fences_every_attempt_until_its_release() -> None:
    attempts = InFlightAttempts(since_restart=0, since_boot=0)
    running, done = _job(1), _job(2)
    _claim(attempts, [running, done])
    assert attempts.fence_all() == [running, done] and attempts.keys() == []
    attempts.returned([done])
    assert attempts.fenced() == ({running.key: running, done.key: done}, {running.key})
    assert attempts.take_ended() == [], "a release is owed first"
    attempts.released([running.key, done.key])
    assert attempts.take_ended() == [done.key]


def test_attempts_stopped_elsewhere_and_a_cold_stop_are_given_up() -> None:
    attempts = InFlightAttempts(since_restart=0, since_boot=0)
    jobs = [_job(3), _job(1), _job(2, claim=2)]
    _claim(attempts, jobs)
    [gone] = attempts.give_up(frozenset({(1, 1), (9, 1)}))
    assert gone.job.id == 1 and attempts.busy == 2
    assert attempts.let_go_all() == [2, 3] and attempts.busy == 0 and attempts.stuck == 3
