"""How many browser jobs a host takes at once: its capacity, or fewer while it cannot carry them.

A host short of CPU or memory that keeps taking ``capacity`` browser jobs does not get slower,
it breaks: pages and Grid calls time out, jobs are released, and a restart (a JVM and a browser
per session) costs more than the jobs it was meant to protect. So, as Crawlee's AutoscaledPool
does, the consumer samples what the host can carry and moves a limit on its browser jobs one
at a time:

- a sample is overloaded when the CPU's pressure (the kernel's PSI: the share of the last 10 s
  in which a runnable task waited for a core) or, without PSI, its use is above its bound, or
  the memory available is below its bound;
- a Grid call that timed out (a released job whose cause was a timeout, a health probe the
  Grid was too busy to answer in time) is slowness;
- at most every ``ADJUST_EVERY_S``: one fewer when slowness was seen since the last step or at
  least ``OVERLOADED_SHARE`` of the window's samples were overloaded; one more, up to capacity,
  when none was, no slowness was seen for ``SLOW_HOLD_S``, and the limit was reached (there
  were jobs to run, so a larger limit would be used).

A consumer starts at one browser job per core and climbs from there. CPU pressure alone never
takes the limit below that: below it the pressure comes from elsewhere (another program on the
host), and fewer browsers would only give it more of the CPU. Memory and slowness may take it
down to one.

Pure but for ``HostSampler``, the only I/O; consumer.browser.supervisor.load_tracker holds the state
and feeds it, for the consumer's stack supervisor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

SAMPLE_EVERY_S = 1.0
WINDOW_S = 10.0  # the samples judged together
ADJUST_EVERY_S = 10.0  # the limit moves at most once per this
OVERLOADED_SHARE = 0.4  # of the window's samples, for one fewer
MIN_SAMPLES = 3  # a window judged on fewer says nothing yet
CPU_PRESSURE_MAX = 0.6  # PSI "some" avg10 (a runnable task waited 60% of the time)
CPU_BUSY_MAX = 0.95  # where the kernel has no PSI
MEMORY_AVAILABLE_MIN = 0.10  # of the host's memory
SLOW_HOLD_S = 30.0  # no step up for this long after a timed-out Grid call
PSI_CPU = Path("/proc/pressure/cpu")


@dataclass(frozen=True)
class LoadSample:
    at: float  # seconds, on the supervisor's clock
    cpu_pressure: float | None  # 0-1; None where the kernel has no PSI
    cpu_busy: float  # 0-1, every core, since the last sample
    memory_available: float  # 0-1 of the host's memory


@dataclass(frozen=True)
class BrowserLoad:
    capacity: int
    cores: int
    limit: int
    why: str | None = None  # what took the limit below capacity (one line)
    samples: tuple[LoadSample, ...] = ()
    slow_at: float | None = None  # the last timed-out Grid call
    slow_what: str | None = None
    slow_unanswered: bool = False  # a timed-out call the limit has not yet stepped down for
    changed_at: float | None = None  # when the limit last moved (None: never)
    peak_in_use: int = 0  # the most browser jobs at once since then

    @classmethod
    def starting(cls, capacity: int, cores: int | None = None) -> BrowserLoad:
        """A consumer's first limit: one browser job per core (each browser started is seconds
        of CPU, and on a host whose pages are CPU-bound more would not be used), raised from
        there while the host is calm and the limit is reached."""
        cores = max(cores or os.cpu_count() or 1, 1)
        limit = min(capacity, cores)
        why = f"starting at one browser job per core ({cores}); more while the host carries them"
        return cls(capacity, cores, limit, why=why if limit < capacity else None)

    @property
    def reason(self) -> str | None:
        """One line for ``hosts list`` and the dashboard; None at full capacity."""
        if self.limit >= self.capacity:
            return None
        return f"taking {self.limit} of {self.capacity} browser jobs: {self.why or 'overloaded'}"


def overload_of(sample: LoadSample) -> tuple[str, bool] | None:
    """(why, is it the CPU alone) when ``sample`` is overloaded, else None."""
    if sample.memory_available < MEMORY_AVAILABLE_MIN:
        return f"{sample.memory_available:.0%} of memory available", False
    if sample.cpu_pressure is not None:
        if sample.cpu_pressure > CPU_PRESSURE_MAX:
            return f"CPU pressure {sample.cpu_pressure:.0%}", True
    elif sample.cpu_busy > CPU_BUSY_MAX:
        return f"CPU {sample.cpu_busy:.0%} busy", True
    return None


def starved(load: BrowserLoad, now: float) -> str | None:
    """Why the host is starved now (the window's samples overloaded as often as it takes to
    lower the limit), else None: a page that times out meanwhile is the host's fault."""
    window = [s for s in load.samples if s.at > now - WINDOW_S]
    overloaded = [found for found in map(overload_of, window) if found is not None]
    if len(window) < MIN_SAMPLES or len(overloaded) / len(window) < OVERLOADED_SHARE:
        return None
    return (
        f"the host was starved ({overloaded[-1][0]} in {len(overloaded)} of {len(window)} samples)"
    )


def observe(load: BrowserLoad, sample: LoadSample, in_use: int) -> BrowserLoad:
    """A new sample, with the browser jobs running at that moment."""
    kept = tuple(s for s in load.samples if s.at > sample.at - WINDOW_S)
    return replace(load, samples=(*kept, sample), peak_in_use=max(load.peak_in_use, in_use))


def note_slow(load: BrowserLoad, at: float, what: str) -> BrowserLoad:
    """A Grid call timed out: the host is slow, not broken."""
    return replace(load, slow_at=at, slow_what=what, slow_unanswered=True)


def adjust(load: BrowserLoad, now: float) -> BrowserLoad:
    """The limit one step down, one step up, or where it is (see the module's rules)."""
    if load.changed_at is not None and now - load.changed_at < ADJUST_EVERY_S:
        return load
    window = [s for s in load.samples if s.at > now - WINDOW_S]
    overloaded = [found for found in map(overload_of, window) if found is not None]
    if load.slow_unanswered or (
        len(window) >= MIN_SAMPLES and len(overloaded) / len(window) >= OVERLOADED_SHARE
    ):
        if load.slow_unanswered:
            why, cpu_only = load.slow_what or "Grid calls time out", False
        else:
            why, cpu_only = overloaded[-1]
            why = f"{why} in {len(overloaded)} of the last {len(window)} samples"
        floor = min(load.cores, load.capacity) if cpu_only else 1
        lower = max(load.limit - 1, floor)
        load = replace(load, slow_unanswered=False)
        if lower >= load.limit:
            return load
        return replace(load, limit=lower, why=why, changed_at=now, peak_in_use=0)
    slow_lately = load.slow_at is not None and now - load.slow_at < SLOW_HOLD_S
    if load.limit < load.capacity and load.peak_in_use >= load.limit and not slow_lately:
        return replace(load, limit=load.limit + 1, changed_at=now, peak_in_use=0)
    return load


class HostSampler:
    """Reads the host's CPU pressure, CPU use and memory; one per consumer (psutil's CPU use
    is since the last call)."""

    def __init__(self, psi: Path = PSI_CPU) -> None:
        self._psi = psi
        psutil.cpu_percent(interval=None)  # the first call only starts the count

    def sample(self, at: float) -> LoadSample:
        memory = psutil.virtual_memory()
        available = memory.available / memory.total if memory.total else 1.0
        busy = psutil.cpu_percent(interval=None) / 100.0
        return LoadSample(at, self._cpu_pressure(), busy, available)

    def _cpu_pressure(self) -> float | None:
        """PSI's "some avg10" as a fraction; None without PSI (an older kernel, or disabled)."""
        try:
            first = self._psi.read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        for field in first.split():
            if field.startswith("avg10="):
                try:
                    return min(max(float(field[6:]) / 100.0, 0.0), 1.0)
                except ValueError:
                    return None
        return None
