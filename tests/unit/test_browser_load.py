"""The browser limit's rules (consumer.browser.supervisor.load_rules) and what counts as
slowness."""

from __future__ import annotations

import pytest
from selenium.common.exceptions import WebDriverException
from urllib3.exceptions import MaxRetryError, ReadTimeoutError

from scrapefleet.common.errors import StackError, timed_out
from scrapefleet.consumer.browser.supervisor import load_rules as browser_load
from scrapefleet.consumer.browser.supervisor.load_rules import (
    BrowserLoad,
    LoadSample,
    adjust,
    note_slow,
    observe,
)

AT_CAPACITY = BrowserLoad(capacity=6, cores=2, limit=6)  # a host that has climbed all the way
CALM = dict(cpu_pressure=0.05, cpu_busy=0.3, memory_available=0.5)
BUSY_CPU = dict(cpu_pressure=0.9, cpu_busy=1.0, memory_available=0.5)
LOW_MEMORY = dict(cpu_pressure=0.05, cpu_busy=0.3, memory_available=0.03)


def run(load: BrowserLoad, seconds: int, in_use: int, **sample: float | None) -> BrowserLoad:
    """A sample a second for ``seconds``, adjusting after each, from the load's last time."""
    start = load.samples[-1].at if load.samples else 0.0
    for t in range(1, seconds + 1):
        now = start + t
        load = adjust(observe(load, LoadSample(now, **sample), in_use), now)  # type: ignore[arg-type]
    return load


def test_a_calm_host_keeps_its_capacity() -> None:
    load = run(AT_CAPACITY, 60, in_use=6, **CALM)
    assert load.limit == 6 and load.reason is None


def test_cpu_pressure_takes_a_step_every_ten_seconds_down_to_a_job_per_core() -> None:
    load = run(AT_CAPACITY, 12, in_use=6, **BUSY_CPU)
    assert load.limit == 5
    load = run(load, 120, in_use=6, **BUSY_CPU)
    assert load.limit == 2  # fewer browsers would only give the CPU to someone else
    assert (
        load.reason == "taking 2 of 6 browser jobs: CPU pressure 90% in 10 of the last 10 samples"
    )


def test_without_psi_the_cpu_use_counts() -> None:
    load = run(AT_CAPACITY, 12, in_use=6, cpu_pressure=None,
               cpu_busy=0.99, memory_available=0.5)  # fmt: skip
    assert load.limit == 5 and load.reason is not None and "CPU 99% busy" in load.reason


def test_low_memory_may_take_it_down_to_one() -> None:
    load = run(AT_CAPACITY, 200, in_use=6, **LOW_MEMORY)
    assert load.limit == 1 and load.reason is not None and "3% of memory available" in load.reason


def test_one_slow_call_is_one_step_and_recovery_waits_until_none_came_for_a_while() -> None:
    load = run(AT_CAPACITY, 5, in_use=6, **CALM)
    load = note_slow(load, 5.5, "the Grid answered its status late")
    load = run(load, 25, in_use=6, **CALM)
    assert load.limit == 5 and load.reason is not None and "status late" in load.reason
    load = run(load, 20, in_use=6, **CALM)  # 30 s after it, busy at the limit: one more
    assert load.limit == 6 and load.reason is None


def test_the_limit_rises_only_when_it_was_reached() -> None:
    load = run(AT_CAPACITY, 30, in_use=6, **BUSY_CPU)
    load = run(load, 15, in_use=1, **CALM)  # the busy samples leave the window
    lowered = load.limit
    assert lowered < 6
    load = run(load, 60, in_use=1, **CALM)  # calm, but one job at a time: no need for more
    assert load.limit == lowered


def test_a_short_window_says_nothing_yet() -> None:
    load = run(AT_CAPACITY, browser_load.MIN_SAMPLES - 1, 6, **BUSY_CPU)
    assert load.limit == 6


def test_the_psi_line_is_read_and_a_missing_file_is_none(tmp_path: pytest.TempPathFactory) -> None:
    psi = tmp_path / "cpu"  # type: ignore[operator]
    psi.write_text("some avg10=87.50 avg60=10.00 avg300=1.00 total=1\nfull avg10=0.00\n")
    assert browser_load.HostSampler(psi)._cpu_pressure() == 0.875
    assert browser_load.HostSampler(tmp_path / "missing")._cpu_pressure() is None  # type: ignore[operator]


def _raised_from(cause: BaseException) -> StackError:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise StackError("loading a page: Grid unreachable") from exc
    except StackError as wrapped:
        return wrapped


@pytest.mark.parametrize(
    "cause",
    [
        TimeoutError("timed out"),  # socket.timeout is TimeoutError
        ReadTimeoutError(None, "/session", "Read timed out."),  # type: ignore[arg-type]
        MaxRetryError(None, "/session", ReadTimeoutError(None, "/session", "x")),  # type: ignore[arg-type]
    ],
)
def test_a_timeout_among_the_causes_is_slowness(cause: BaseException) -> None:
    assert timed_out(_raised_from(cause))


@pytest.mark.parametrize(
    "cause",
    [
        ConnectionRefusedError("refused"),
        WebDriverException("invalid session id"),
        MaxRetryError(None, "/session", ConnectionRefusedError()),  # type: ignore[arg-type]
    ],
)
def test_a_dead_stack_is_not_slowness(cause: BaseException) -> None:
    assert not timed_out(_raised_from(cause))


def test_a_consumer_starts_at_a_job_per_core_and_climbs_while_calm_and_busy() -> None:
    load = BrowserLoad.starting(6, cores=2)
    assert load.limit == 2 and load.reason is not None and "one browser job per core" in load.reason
    load = run(load, 45, in_use=6, **CALM)
    assert load.limit == 6 and load.reason is None
    assert BrowserLoad.starting(6, cores=8).limit == 6


def test_starved_means_overloaded_as_often_as_it_takes_to_lower_the_limit() -> None:
    busy = run(AT_CAPACITY, 10, in_use=6, **BUSY_CPU)
    why = browser_load.starved(busy, now=busy.samples[-1].at)
    assert why is not None and "CPU pressure 90%" in why
    calm = run(AT_CAPACITY, 10, in_use=6, **CALM)
    assert browser_load.starved(calm, now=calm.samples[-1].at) is None
    assert browser_load.starved(AT_CAPACITY, now=0.0) is None  # no samples: nothing known
