"""Prometheus metrics of both daemons, and the HTTP endpoint that serves them.

Each daemon serves its own process's metrics on ``metrics_address:metrics_port`` (loopback by
default; 0 = no endpoint): the producer's instruments live in ``PRODUCER_REGISTRY``, the
consumer's in ``CONSUMER_REGISTRY``, each with the client library's process_* and python_*
collectors, so that a consumer never exports the producer's series as zeros (nor the reverse).

Two kinds of figures:
- events counted where they happen (cycle durations, probe failures, webhook POSTs, job
  durations): ordinary Counters and Histograms below;
- the state of the fleet as the database has it (jobs per status and kind, host states,
  restarts and reboots per host): the producer reads it every ``metrics_refresh_s`` and hands a
  ``FleetSnapshot`` to ``publish_fleet_snapshot``; a collector exposes the latest one at each
  scrape. Restarts and reboots come from host_events, so they are exposed as counters that
  survive a producer restart (and a failover).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scrapefleet.common.db.schema_base import HOST_STATES, JOB_STATUSES


def _daemon_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


PRODUCER_REGISTRY = _daemon_registry()
CONSUMER_REGISTRY = _daemon_registry()

# ---------------------------------------------------------------- producer

ASSIGNMENT_CYCLE_SECONDS = Histogram(
    "scrapefleet_assignment_cycle_duration_seconds",
    "Duration of one producer cycle (full: probes + rescue + assignment; wake: assignment)",
    ["cycle"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=PRODUCER_REGISTRY,
)
JOBS_ASSIGNED_PER_CYCLE = Histogram(
    "scrapefleet_assignment_cycle_jobs",
    "Jobs assigned by one producer cycle",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
    registry=PRODUCER_REGISTRY,
)
JOBS_ASSIGNED = Counter(
    "scrapefleet_jobs_assigned_total", "Jobs moved pending -> queued", registry=PRODUCER_REGISTRY
)
PROBE_ROUND_SECONDS = Histogram(
    "scrapefleet_probe_round_duration_seconds",
    "Duration of one probe round over every host (hosts are probed in parallel)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=PRODUCER_REGISTRY,
)
PROBES = Counter("scrapefleet_probes_total", "Host probes", ["host"], registry=PRODUCER_REGISTRY)
PROBE_FAILURES = Counter(
    "scrapefleet_probe_failures_total",
    "Host probes that failed",
    ["host"],
    registry=PRODUCER_REGISTRY,
)
WEBHOOK_DELIVERIES = Counter(
    "scrapefleet_webhook_deliveries_total",
    "Webhook POST attempts by outcome (delivered, failed = will retry, gave_up)",
    ["outcome"],
    registry=PRODUCER_REGISTRY,
)
WEBHOOK_POST_SECONDS = Histogram(
    "scrapefleet_webhook_post_duration_seconds",
    "Duration of one webhook POST",
    registry=PRODUCER_REGISTRY,
)
RETENTION_ARCHIVED_JOBS = Counter(
    "scrapefleet_retention_archived_jobs_total",
    "Finished jobs moved to jobs_archive",
    registry=PRODUCER_REGISTRY,
)
RETENTION_DELETED_ARTIFACT_DIRS = Counter(
    "scrapefleet_retention_deleted_artifact_dirs_total",
    "Job artifact folders deleted",
    registry=PRODUCER_REGISTRY,
)

# ---------------------------------------------------------------- consumer

JOB_DURATION_SECONDS = Histogram(
    "scrapefleet_job_duration_seconds",
    "Duration of one job attempt on this host, by kind and outcome",
    ["kind", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=CONSUMER_REGISTRY,
)
JOB_RETRIES = Counter(
    "scrapefleet_job_retries_total",
    "Failed attempts that will be retried",
    ["kind"],
    registry=CONSUMER_REGISTRY,
)
BROWSER_MEMORY_BYTES = Gauge(
    "scrapefleet_browser_memory_bytes",
    "Proportional set size of this host's browser stack (Xvfb, Grid, Chromium)",
    ["host"],
    registry=CONSUMER_REGISTRY,
)

BROWSER_LIMIT = Gauge(
    "scrapefleet_browser_limit",
    "Browser jobs this host takes at once now: its capacity, or fewer while it is short of CPU"
    " or memory or its Grid answers late (the host's status says why)",
    ["host"],
    registry=CONSUMER_REGISTRY,
)


def observe_job(kind: str, outcome: str, duration_s: float, *, retried: bool) -> None:
    """The consumer's one call per finished attempt."""
    JOB_DURATION_SECONDS.labels(kind=kind, outcome=outcome).observe(duration_s)
    if retried:
        JOB_RETRIES.labels(kind=kind).inc()


def track_browser_memory(host: str, read_bytes: Callable[[], float]) -> None:
    """Read the stack's memory at each scrape (the browser stack passes its own reader)."""
    BROWSER_MEMORY_BYTES.labels(host=host).set_function(read_bytes)


def track_browser_limit(host: str, read_limit: Callable[[], float]) -> None:
    """Read the host's browser limit at each scrape."""
    BROWSER_LIMIT.labels(host=host).set_function(read_limit)


# ---------------------------------------------------------------- the fleet, from SQL


@dataclass(frozen=True)
class HostFigures:
    state: str
    memory_available_bytes: int | None
    restarts: int
    reboots: int


@dataclass(frozen=True)
class ProducerFigures:
    """Whether a producer assigns, judged from the producers table (common.reads.producer_status)
    at the refresh: any producer, a standby too, exports the leader's, since a dead leader
    cannot export its own."""

    up: bool
    last_cycle_timestamp_s: float | None  # the leader's last cycle; None: no producer ever ran


@dataclass(frozen=True)
class ScheduleFigures:
    """One schedule (the schedules view): when it runs next, and how its runs went."""

    paused: bool
    next_run_timestamp_s: float
    overdue_s: float  # how far past its next slot it is, unfired (0 when not due, or paused)
    last_run_timestamp_s: float | None  # its last run's fire time, whatever its outcome
    last_lag_s: float | None  # how late that run fired after its slot
    last_success_timestamp_s: float | None  # the last run whose every job completed


@dataclass(frozen=True)
class RateKeyFigures:
    """One row of the rate_limits view: a site the fleet holds to a limit, or slowed, or
    paused (queries.rate_keys)."""

    in_flight: int
    pending: int
    factor: float  # 1 = full speed; halved per push-back
    paused: bool  # a Retry-After holds every job of the key


@dataclass(frozen=True)
class IdentityFigures:
    """A proxy pool's (or a profile's) last hour: leases, those that ended blocked, and for a
    pool its proxies by state (common.reads.identity_figures)."""

    leases: int
    blocks: int
    states: Mapping[str, int] = field(default_factory=dict)

    @property
    def ban_rate(self) -> float:
        return self.blocks / self.leases if self.leases else 0.0


PROXY_STATES = ("ready", "cooling", "banned", "disabled")


@dataclass(frozen=True)
class FleetSnapshot:
    jobs: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (status, kind) -> n
    hosts: Mapping[str, HostFigures] = field(default_factory=dict)
    producer: ProducerFigures | None = None
    oldest_pending_age_s: float = 0.0  # of a pending job due now; 0 when none waits
    rate_keys: Mapping[str, RateKeyFigures] = field(default_factory=dict)
    schedules: Mapping[str, ScheduleFigures] = field(default_factory=dict)
    proxy_pools: Mapping[str, IdentityFigures] = field(default_factory=dict)
    profiles: Mapping[str, IdentityFigures] = field(default_factory=dict)  # the top few


def job_counts_with_zeros(
    jobs: Mapping[tuple[str, str], int], kinds: Iterable[str] = ()
) -> dict[tuple[str, str], int]:
    """Every status of every kind (those counted, plus ``kinds``), 0 where none: a series that
    vanished at zero would read as "no data", not as an empty queue, in graphs and alerts."""
    all_kinds = {kind for _, kind in jobs} | set(kinds)
    return {
        (status, kind): jobs.get((status, kind), 0) for status in JOB_STATUSES for kind in all_kinds
    }


class _FleetCollector(Collector):
    def __init__(self) -> None:
        self._snapshot: FleetSnapshot | None = None
        self._kinds: set[str] = set()  # every kind seen since start: its series stay, at 0
        self._lock = threading.Lock()

    def publish(self, snapshot: FleetSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._kinds.update(kind for _, kind in snapshot.jobs)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = self._snapshot
            kinds = set(self._kinds)
        if snapshot is None:  # not a producer, or no refresh yet: nothing rather than zeros
            return
        jobs = GaugeMetricFamily(
            "scrapefleet_jobs",
            "Jobs in the jobs table by status and kind",
            labels=["status", "kind"],
        )
        for (status, kind), count in sorted(job_counts_with_zeros(snapshot.jobs, kinds).items()):
            jobs.add_metric([status, kind], count)
        state = GaugeMetricFamily(
            "scrapefleet_host_state", "1 for the host's current state", labels=["host", "state"]
        )
        memory = GaugeMetricFamily(
            "scrapefleet_host_memory_available_bytes",
            "Memory available on the host at its last probe",
            labels=["host"],
        )
        restarts = CounterMetricFamily(
            "scrapefleet_host_restarts", "Browser stack restarts (host_events)", labels=["host"]
        )
        reboots = CounterMetricFamily(
            "scrapefleet_host_reboots", "Host reboots (host_events)", labels=["host"]
        )
        for host, figures in sorted(snapshot.hosts.items()):
            for name in HOST_STATES:
                state.add_metric([host, name], 1.0 if name == figures.state else 0.0)
            if figures.memory_available_bytes is not None:
                memory.add_metric([host], figures.memory_available_bytes)
            restarts.add_metric([host], figures.restarts)
            reboots.add_metric([host], figures.reboots)
        oldest = GaugeMetricFamily(
            "scrapefleet_oldest_pending_age_seconds",
            "How long the oldest pending job due now has waited; 0 when none waits",
        )
        oldest.add_metric([], snapshot.oldest_pending_age_s)
        yield from (jobs, state, memory, restarts, reboots, oldest)
        yield from _rate_key_families(snapshot.rate_keys)
        yield from _schedule_families(snapshot.schedules)
        yield from _identity_families(snapshot.proxy_pools, snapshot.profiles)
        if snapshot.producer is not None:
            yield from _producer_families(snapshot.producer)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected lazily: registration must not call collect()


def _identity_families(
    pools: Mapping[str, IdentityFigures], profiles: Mapping[str, IdentityFigures]
) -> Iterator[Metric]:
    proxies = GaugeMetricFamily(
        "scrapefleet_proxy_pool_proxies",
        "The pool's proxies in each state (ready, cooling, banned, disabled)",
        labels=["pool", "state"],
    )
    for name, figures in sorted(pools.items()):
        for state in PROXY_STATES:
            proxies.add_metric([name, state], figures.states.get(state, 0))
    yield proxies
    # (name, figure, help): each name written out whole, where the monitoring files' test
    # finds the exported names.
    last_hour = (
        ("scrapefleet_proxy_pool_leases", "leases", "Leases of the pool's proxies, last hour"),
        ("scrapefleet_proxy_pool_blocks", "blocks", "Of the pool's leases, those blocked"),
        ("scrapefleet_proxy_pool_ban_rate", "ban_rate", "The pool's blocked over all leases"),
        ("scrapefleet_profile_leases", "leases", "The profile's jobs, last hour (top blocked)"),
        ("scrapefleet_profile_blocks", "blocks", "Of those, the ones blocked (top blocked)"),
        ("scrapefleet_profile_ban_rate", "ban_rate", "The profile's blocked over all jobs"),
    )
    for name, figure, text in last_hour:
        pool = name.startswith("scrapefleet_proxy_pool_")
        family = GaugeMetricFamily(name, text, labels=["pool" if pool else "profile"])
        for key, figures in sorted((pools if pool else profiles).items()):
            family.add_metric([key], getattr(figures, figure))
        yield family


def _rate_key_families(keys: Mapping[str, RateKeyFigures]) -> Iterator[Metric]:
    families = {
        "factor": GaugeMetricFamily(
            "scrapefleet_rate_key_factor",
            "The key's limits are scaled by this after push-back (1 = full speed)",
            labels=["key"],
        ),
        "paused": GaugeMetricFamily(
            "scrapefleet_rate_key_paused", "1 while a Retry-After pauses the key", labels=["key"]
        ),
        "in_flight": GaugeMetricFamily(
            "scrapefleet_rate_key_in_flight", "The key's jobs queued or running", labels=["key"]
        ),
        "pending": GaugeMetricFamily(
            "scrapefleet_rate_key_pending", "The key's pending jobs", labels=["key"]
        ),
    }
    for key, figures in sorted(keys.items()):
        families["factor"].add_metric([key], figures.factor)
        families["paused"].add_metric([key], 1.0 if figures.paused else 0.0)
        families["in_flight"].add_metric([key], figures.in_flight)
        families["pending"].add_metric([key], figures.pending)
    yield from families.values()


def _schedule_families(schedules: Mapping[str, ScheduleFigures]) -> Iterator[Metric]:
    def family(name: str, text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"scrapefleet_schedule_{name}", text, labels=["schedule"])

    paused = family("paused", "1 while the schedule is paused")
    next_run = family("next_run_timestamp_seconds", "Unix time of the schedule's next slot")
    overdue = family(
        "overdue_seconds",
        "How far past its next slot the schedule is, unfired (0 when not due or paused):"
        " above a few producer intervals, no producer is firing it",
    )
    last_run = family("last_run_timestamp_seconds", "Unix time its last run fired")
    last_lag = family("last_lag_seconds", "How late its last run fired after its slot")
    success = family(
        "last_success_timestamp_seconds", "Unix time of its last run whose every job completed"
    )
    for name, figures in sorted(schedules.items()):
        paused.add_metric([name], 1.0 if figures.paused else 0.0)
        next_run.add_metric([name], figures.next_run_timestamp_s)
        overdue.add_metric([name], figures.overdue_s)
        if figures.last_run_timestamp_s is not None:
            last_run.add_metric([name], figures.last_run_timestamp_s)
        if figures.last_lag_s is not None:
            last_lag.add_metric([name], figures.last_lag_s)
        if figures.last_success_timestamp_s is not None:
            success.add_metric([name], figures.last_success_timestamp_s)
    yield from (paused, next_run, overdue, last_run, last_lag, success)


def _producer_families(figures: ProducerFigures) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "scrapefleet_producer_up",
        "1 when a producer cycled within max(3 x its interval, 10 s) and has not stopped",
    )
    up.add_metric([], 1.0 if figures.up else 0.0)
    yield up
    if figures.last_cycle_timestamp_s is not None:
        last = GaugeMetricFamily(
            "scrapefleet_producer_last_cycle_timestamp_seconds",
            "Unix time of the leading producer's last full cycle",
        )
        last.add_metric([], figures.last_cycle_timestamp_s)
        yield last


_FLEET = _FleetCollector()
PRODUCER_REGISTRY.register(_FLEET)


def publish_fleet_snapshot(snapshot: FleetSnapshot) -> None:
    _FLEET.publish(snapshot)


# ---------------------------------------------------------------- the endpoint


class MetricsServer:
    """``GET /metrics`` on its own thread; ``close()`` stops it."""

    def __init__(self, address: str, port: int, registry: CollectorRegistry) -> None:
        server, thread = start_http_server(port, addr=address, registry=registry)
        self._server: WSGIServer = server
        self._thread = thread
        self.address = address
        self.port: int = server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(address: str, port: int, registry: CollectorRegistry) -> MetricsServer | None:
    """Start the endpoint for ``registry`` when ``port`` is set (0 = metrics off)."""
    return MetricsServer(address, port, registry) if port else None
