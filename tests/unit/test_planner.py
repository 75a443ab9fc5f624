"""The planner: free slots per host and the assignment plan, as pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.reads.queries import HostRow
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.assigning.planner import (
    HostChoice,
    HostSlots,
    host_kinds,
    host_slots,
    plan_assignments,
    runnable_kinds,
)
from tests.host_status_factory import status_for

GIB = 1024**3


def _row(name: str, capacity: int = 6, state: str = "active") -> HostRow:
    return HostRow(name, capacity, state, None, 22, "scrapefleet", None, None, 0, None)


def _status(
    name: str, running: int = 0, state: str = "active", available: int = 8 * GIB
) -> HostStatus:
    return status_for(
        name,
        running=running,
        state=state,
        memory_available_bytes=available,
        memory_total_bytes=16 * GIB,
        updated_at=0.0,
    )


@dataclass(frozen=True)
class Job:
    id: int
    lock_key: str | None
    needs_browser: bool = False
    kind: str = "noop"


def _jobs(*lock_keys: str | None) -> list[Job]:
    return [Job(i + 1, key) for i, key in enumerate(lock_keys)]


# ---------------------------------------------------------------- host_slots


def test_free_is_capacity_minus_the_larger_of_probe_and_database() -> None:
    slots = host_slots(
        [_row("a"), _row("b")],
        {"a": _status("a", running=4), "b": _status("b", running=1)},
        {"a": 2, "b": 3},
        0.15,
    )
    assert slots == [HostSlots("a", 6, 4, 2), HostSlots("b", 6, 3, 3)]


def test_a_full_host_never_gets_negative_slots() -> None:
    (slot,) = host_slots([_row("a", capacity=2)], {"a": _status("a", running=5)}, {}, 0.0)
    assert slot.free == 0 and slot.in_flight == 5


def test_any_doubt_gives_no_slot() -> None:
    hosts = [
        _row("db-draining", state="draining"),
        _row("db-offline", state="offline"),
        _row("probe-failed"),
        _row("not-probed"),
        _row("reports-restarting"),
        _row("low-memory"),
        _row("ok"),
    ]
    probes: dict[str, HostStatus | ProbeError] = {
        "db-draining": _status("db-draining"),
        "db-offline": _status("db-offline"),
        "probe-failed": ProbeError("timed out"),
        "reports-restarting": _status("reports-restarting", state="restarting"),
        "low-memory": _status("low-memory", available=1 * GIB),  # 1/16 < 0.15
        "ok": _status("ok"),
    }
    free = {s.name: s.free for s in host_slots(hosts, probes, {}, 0.15)}
    assert free == {name: 0 for name in free if name != "ok"} | {"ok": 6}


def test_unknown_total_memory_is_not_a_reason_to_refuse() -> None:
    status = _status("a", available=0)
    status = HostStatus(**{**status.__dict__, "memory_total_bytes": 0})
    assert host_slots([_row("a")], {"a": status}, {}, 0.5)[0].free == 6


# ---------------------------------------------------------------- plan_assignments


def test_jobs_go_to_the_least_loaded_host_in_priority_order() -> None:
    hosts = [HostSlots("a", 6, 4, 2), HostSlots("b", 6, 0, 6), HostSlots("c", 3, 1, 2)]
    plan = plan_assignments(hosts, _jobs(*[None] * 20), set())
    assert [job for job, _ in plan] == list(range(1, 11))  # the first 10 = all free slots
    per_host = {h: sum(1 for _, x in plan if x == h) for h in "abc"}
    assert per_host == {"a": 2, "b": 6, "c": 2}
    # b (0/6) first; ties between equal loads go by name.
    assert plan[0] == (1, "b")


def test_ties_are_broken_by_name() -> None:
    plan = plan_assignments(
        [HostSlots("b", 6, 0, 6), HostSlots("a", 6, 0, 6)], _jobs(None, None), set()
    )
    assert plan == [(1, "a"), (2, "b")]


def test_busy_and_repeated_lock_keys_are_skipped() -> None:
    jobs = _jobs("acct-1", "acct-2", "acct-1", None, "acct-3")
    plan = plan_assignments([HostSlots("a", 6, 0, 6)], jobs, {"acct-2"})
    assert [job for job, _ in plan] == [1, 4, 5]


def test_no_free_slot_no_plan() -> None:
    assert plan_assignments([HostSlots("a", 6, 6, 0)], _jobs(None), set()) == []
    assert plan_assignments([], _jobs(None), set()) == []


# ---------------------------------------------------------------- the property

hosts_strategy = st.lists(
    st.tuples(st.integers(1, 8), st.integers(0, 10)), min_size=0, max_size=6
).map(
    lambda specs: [
        HostSlots(f"h{i}", cap, load, max(0, cap - load)) for i, (cap, load) in enumerate(specs)
    ]
)
keys = st.one_of(st.none(), st.sampled_from([f"k{i}" for i in range(6)]))


@given(
    hosts=hosts_strategy,
    lock_keys=st.lists(keys, max_size=60),
    busy=st.sets(st.sampled_from([f"k{i}" for i in range(6)])),
)
def test_plan_respects_slots_and_keys_and_fills_what_it_can(
    hosts: list[HostSlots], lock_keys: list[str | None], busy: set[str]
) -> None:
    jobs = _jobs(*lock_keys)
    plan = plan_assignments(hosts, jobs, busy)

    per_host: dict[str, int] = {}
    for _, name in plan:
        per_host[name] = per_host.get(name, 0) + 1
    for slot in hosts:
        assert per_host.get(slot.name, 0) <= slot.free

    by_id = {j.id: j for j in jobs}
    assert len({job for job, _ in plan}) == len(plan)
    planned_keys = [by_id[job].lock_key for job, _ in plan if by_id[job].lock_key is not None]
    assert len(planned_keys) == len(set(planned_keys))
    assert not set(planned_keys) & busy

    # As many as possible, and the highest-priority ones: exactly the first
    # min(free slots, eligible jobs) eligible jobs, where a job is eligible when its key is
    # free and not held by an earlier job.
    eligible, seen = [], set(busy)
    for job in jobs:
        if job.lock_key is None or job.lock_key not in seen:
            eligible.append(job.id)
            if job.lock_key is not None:
                seen.add(job.lock_key)
    expected = eligible[: sum(h.free for h in hosts)]
    assert [job for job, _ in plan] == expected


# ---------------------------------------------------------------- browser capability


def test_browser_jobs_go_only_to_hosts_whose_stack_takes_them() -> None:
    hosts = [HostSlots("a", 6, 0, 6, takes_browser=False), HostSlots("b", 6, 3, 3)]
    jobs = [Job(1, None, True), Job(2, None, False), Job(3, None, True)]
    assert plan_assignments(hosts, jobs, set()) == [(1, "b"), (2, "a"), (3, "b")]


def test_browser_jobs_nobody_can_run_do_not_hold_up_the_others() -> None:
    hosts = [HostSlots("a", 2, 0, 2, takes_browser=False)]
    jobs = [Job(1, "acct", True), Job(2, None, True), Job(3, "acct", False), Job(4, None, False)]
    # The browser jobs stay pending; their lock key is not taken by a job that was not placed.
    assert plan_assignments(hosts, jobs, set()) == [(3, "a"), (4, "a")]


@given(
    hosts=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 10), st.booleans()), max_size=6).map(
        lambda specs: [
            HostSlots(f"h{i}", cap, load, max(0, cap - load), browser)
            for i, (cap, load, browser) in enumerate(specs)
        ]
    ),
    specs=st.lists(st.tuples(keys, st.booleans()), max_size=60),
    busy=st.sets(st.sampled_from([f"k{i}" for i in range(6)])),
)
def test_an_unplaced_job_means_no_host_of_its_kind_had_a_slot(
    hosts: list[HostSlots], specs: list[tuple[str | None, bool]], busy: set[str]
) -> None:
    jobs = [Job(i + 1, key, browser) for i, (key, browser) in enumerate(specs)]
    plan = dict(plan_assignments(hosts, jobs, busy))
    by_name = {h.name: h for h in hosts}
    used = {h.name: 0 for h in hosts}
    for job_id, name in plan.items():
        used[name] += 1
        assert by_name[name].takes_browser or not jobs[job_id - 1].needs_browser
    assert all(used[h.name] <= h.free for h in hosts)
    left = {h.name: h.free - used[h.name] for h in hosts}
    taken: set[str] = set()
    for job in jobs:
        if job.id in plan:
            if job.lock_key is not None:
                assert job.lock_key not in taken and job.lock_key not in busy
                taken.add(job.lock_key)
            continue
        if job.lock_key is not None and (job.lock_key in busy or job.lock_key in taken):
            continue
        could_run = [h for h in hosts if h.takes_browser or not job.needs_browser]
        assert all(left[h.name] == 0 for h in could_run), f"job {job.id} left while {left}"


def test_a_host_below_its_browser_limit_gets_that_many_browser_jobs_and_other_jobs_besides() -> (
    None
):
    busy = status_for(
        "a", running=1, memory_available_bytes=8 * GIB, memory_total_bytes=16 * GIB,
        updated_at=0.0, browser_limit=3, browser_limit_reason="taking 3 of 6 browser jobs: ...",
    )  # fmt: skip
    [slots] = host_slots([_row("a")], {"a": busy}, {"a": 1}, 0.15, {"a": 1})
    assert (slots.free, slots.browser_free) == (5, 2)  # one browser job in flight, limit 3
    browser = [Job(i, None, needs_browser=True) for i in range(1, 5)]
    plain = [Job(i, None) for i in range(5, 8)]
    plan = plan_assignments([slots], [*browser, *plain], set())
    assert [job for job, _ in plan] == [1, 2, 5, 6, 7]  # two browser jobs, then the others


def test_a_host_that_reports_no_browser_limit_takes_browser_jobs_up_to_its_free_slots() -> None:
    [slots] = host_slots([_row("a")], {"a": _status("a")}, {}, 0.15, {})
    assert slots.browser_free is None
    plan = plan_assignments([slots], [Job(i, None, needs_browser=True) for i in range(9)], set())
    assert len(plan) == 6


# ---------------------------------------------------------------- kinds


def test_a_job_goes_only_to_a_host_that_runs_its_kind() -> None:
    hosts = [
        HostSlots("busy-scraper", 6, 5, 1, kinds=frozenset({"noop", "prices"})),
        HostSlots("idle", 6, 0, 6, kinds=frozenset({"noop"})),
        HostSlots("old", 6, 0, 6),  # does not say: runs any kind
    ]
    jobs = [Job(1, None, kind="prices"), Job(2, None, kind="prices"), Job(3, None, kind="noop")]
    only_one = [h for h in hosts if h.name != "old"]
    # Job 2 finds no slot left with its kind: it stays pending.
    assert plan_assignments(only_one, jobs, set()) == [(1, "busy-scraper"), (3, "idle")]
    assert plan_assignments(hosts, jobs, set()) == [(1, "old"), (2, "old"), (3, "idle")]


def test_a_kind_no_host_runs_waits_without_holding_up_the_jobs_behind_it() -> None:
    hosts = [HostSlots("a", 2, 0, 2, kinds=frozenset({"noop"}))]
    jobs = [Job(i, None, kind="prices") for i in range(1, 5)] + [Job(9, None)]
    assert plan_assignments(hosts, jobs, set()) == [(9, "a")]


def test_runnable_kinds_are_those_of_the_hosts_with_a_slot() -> None:
    noop, prices = frozenset({"noop"}), frozenset({"noop", "prices"})
    assert runnable_kinds(
        [HostSlots("a", 6, 0, 6, kinds=noop), HostSlots("b", 6, 6, 0, kinds=prices)]
    ) == frozenset({"noop"})
    assert runnable_kinds(
        [HostSlots("a", 6, 0, 6, kinds=noop), HostSlots("b", 6, 0, 6, kinds=prices)]
    ) == frozenset({"noop", "prices"})
    assert runnable_kinds([HostSlots("a", 6, 0, 6, kinds=noop), HostSlots("b", 6, 0, 6)]) is None
    assert runnable_kinds([HostSlots("b", 6, 6, 0, kinds=prices)]) == frozenset()


def test_host_kinds_shares_one_set_per_distinct_report() -> None:
    probes: dict[str, HostStatus | ProbeError] = {
        "a": status_for("a", kinds={"noop": "1", "prices": "2"}),
        "b": status_for("b", kinds={"prices": "2", "noop": "1"}),
        "c": status_for("c"),  # not reported: any kind
        "d": ProbeError("down"),
    }
    kinds = host_kinds(probes)
    assert set(kinds) == {"a", "b"} and kinds["a"] is kinds["b"]
    slots = host_slots([_row("a"), _row("c")], probes, {}, 0.0, kinds=kinds)
    assert [s.kinds for s in slots] == [frozenset({"noop", "prices"}), None]


# ---------------------------------------------------------------- pinned jobs


@dataclass(frozen=True)
class PinnedJob:
    id: int
    lock_key: str | None = None
    needs_browser: bool = False
    pinned_host: str | None = None
    kind: str = "noop"


def test_a_pinned_job_goes_to_its_host_or_waits_never_elsewhere() -> None:
    """Its host full, out of browser, or gone from the plan: the job stays pending, while the
    idle host beside it gets the jobs nobody pinned."""
    idle = HostSlots("a", 6, 0, 6)
    jobs = [
        PinnedJob(1, pinned_host="b"),
        PinnedJob(2),
        PinnedJob(3, needs_browser=True, pinned_host="b"),
    ]
    assert plan_assignments([idle, HostSlots("b", 6, 6, 0)], jobs, set()) == [(2, "a")]
    no_browser = HostSlots("b", 6, 0, 6, takes_browser=False)
    assert plan_assignments([idle, no_browser], jobs, set()) == [(1, "b"), (2, "a")]
    assert plan_assignments([idle], jobs, set()) == [(2, "a")]
    # With a slot there it goes there, though the other host is less loaded.
    assert plan_assignments([idle, HostSlots("b", 6, 5, 1)], jobs[:1], set()) == [(1, "b")]


def test_a_pin_narrows_what_a_placement_allows_and_overrides_what_it_avoids() -> None:
    class Avoid:
        def hosts_for(self, job: object) -> HostChoice:
            return HostChoice(allowed=frozenset({"a", "b"}), avoid=frozenset({"b"}))

        def placed(self, job: object, host: str) -> None:
            pass

    hosts = [HostSlots("a", 6, 0, 6), HostSlots("b", 6, 0, 6), HostSlots("c", 6, 0, 6)]
    plan = plan_assignments(
        hosts, [PinnedJob(1, pinned_host="b"), PinnedJob(2, pinned_host="c")], set(), Avoid()
    )
    assert plan == [(1, "b")]  # c is pinned but not allowed by the placement: it waits
