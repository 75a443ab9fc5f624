"""The consumer daemon of one host: claim its queued jobs, run them in threads, report.

Threads, each with one job:
- main (``run``): wakes on a NOTIFY for this host, on a freed slot while more work may be
  queued, on a change of its lifecycle, or every ``consumer_poll_s``; claims up to the free
  slots in ONE statement, hands the jobs to a pool of ``capacity`` threads, and enforces
  ``job_timeout_s``;
- workers (the pool): run one job each with consumer.runner and pass the outcome on;
- recorder (consumer.recorder): writes outcomes, a batch per transaction;
- heartbeat: every ``heartbeat_s`` marks the running jobs and the host alive, learns the host
  state an operator may have changed (draining, disabled, active again), rewrites the status file;
- listener: LISTEN for assignments (the poll covers a NOTIFY lost across a reconnect);
- stack (with ``settings.browser``): carries out the browser stack's actions, see below.
docs/consumer-threads.md lists them with their names and owners.

The browser stack (when ``settings.browser``) belongs to a
consumer.browser.supervisor.stack_supervisor, which the main loop consults before and after each
claim and lets do restarts and reboots between them, on the supervisor's own thread; failure
artifacts are captured per failed browser attempt and pruned hourly
(consumer.browser.actions.artifact_janitor).

What a consumer is (consumer.config.ConsumerConfig) is fixed before it starts; what it holds
while it runs (consumer.serving.RunningConsumer) is built in one place once its host is
registered, so none of it is ever missing. Shutdown is its common.runtime.lifecycle.Lifecycle, which
every loop checks:
- warm (a first SIGTERM/SIGINT, ``request_stop``, idle): no new claims, queued jobs handed back,
  in-flight jobs finish, for at most ``drain_timeout_s`` (unless told, the longest an attempt
  may run: ``job_timeout_s`` or an action's own ``timeout_s``);
- cold (a second signal, ``request_cold_stop``, a drain past its deadline): in-flight jobs are
  not waited for; they end as a crash's would (released: back to pending, the attempt given
  back) and their late results are dropped, so none completes twice.
Either way the host is left offline and the status document says ``daemon: stopped``.
A side thread that dies (heartbeat, listener, recorder, janitor, the stack's thread) stops the
consumer cold, and ``run`` returns 1 (common.runtime.side_threads, docs/consumer-threads.md).

A job past its timeout is recorded as a failed attempt at once; its thread cannot be killed, so
it is counted as stuck and keeps its pool slot until it returns. The status document has no
field of its own for stuck threads: they are counted in ``running``, which is what the producer
needs (busy slots), and logged.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine

from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.config import ConsumerConfig
from scrapefleet.consumer.runner import CaptureFailure, DriverFactory
from scrapefleet.consumer.serving import RunningConsumer

log = logging.getLogger(__name__)


class Consumer:
    """One host's consumer: its configuration and lifecycle; ``run`` serves until stopped."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        host_name: str,
        *,
        driver_factory: DriverFactory | None = None,
        capture_failure: CaptureFailure | None = None,
        drain_timeout_s: float | None = None,
    ) -> None:
        self.config = ConsumerConfig.build(
            settings,
            host_name,
            driver_factory=driver_factory,
            capture_failure=capture_failure,
            drain_timeout_s=drain_timeout_s,
        )
        self.engine = engine
        self.lifecycle = Lifecycle(
            f"consumer {host_name}", drain_timeout_s=self.config.drain_timeout_s
        )
        self._running: RunningConsumer | None = None

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def settings(self) -> Settings:
        return self.config.settings

    @property
    def supervisor(self) -> StackSupervisor | None:
        """The browser stack's supervisor, once started (None without a stack of its own)."""
        return self._running.supervisor if self._running is not None else None

    @property
    def running(self) -> int:
        """Busy pool threads: jobs running plus threads stuck past their job's timeout (or let
        go by a cold stop)."""
        return self._running.running if self._running is not None else 0

    @property
    def stuck(self) -> int:
        return self._running.stuck if self._running is not None else 0

    @property
    def state(self) -> str:
        """The host state this consumer reports in its status document."""
        return self._running.state if self._running is not None else "active"

    def request_stop(self, reason: str = "stop requested") -> None:
        """Begin a warm drain; safe from any thread (not from a signal handler: see
        common.runtime.lifecycle.StopSignals)."""
        self.lifecycle.request_stop(reason)

    def request_cold_stop(self, reason: str = "cold stop requested") -> None:
        """Stop without waiting for in-flight jobs; safe from any thread."""
        self.lifecycle.request_cold_stop(reason)

    def run(self, until_idle: bool = False) -> int:
        """Serve until stopped (or, with ``until_idle``, until there is nothing left to do
        here); returns the exit code: 0, or 1 when a side thread died (common.runtime.side_threads:
        it stopped the consumer cold). Raises DatabaseUnavailable if the database cannot be
        reached at start, SettingsError for a bad ``actions`` setting."""
        try:
            self._running = RunningConsumer.open(self.config, self.engine, self.lifecycle)
        except BaseException:
            self.lifecycle.stopped()
            raise
        return self._running.serve(until_idle)
