"""How a running consumer stops (consumer.daemon says when and how): queued jobs handed back,
the drain, the cold stop's attempts let go, and the host left offline. Stopper is the main
thread's, once its loop has ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Engine

from scrapefleet.common import store
from scrapefleet.common.db.engines import transaction
from scrapefleet.common.db.statement_connection import StatementConnection
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable
from scrapefleet.common.runtime.lifecycle import Lifecycle
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.common.store.statuses import HostState
from scrapefleet.consumer.attempt_endings import AttemptEndings
from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor
from scrapefleet.consumer.heartbeat import DB_RETRY_MAX_S
from scrapefleet.consumer.in_flight import InFlightAttempts
from scrapefleet.consumer.recorder import OutcomeRecorder

# One logger for every part of the running consumer: its lines keep the name they had.
log = logging.getLogger("scrapefleet.consumer.serving")

# Reason under which a stopping consumer drains its own host; a restart recognises it (an
# operator's drain has another reason and is kept).
OWN_DRAIN_REASON = "consumer stopping"
# A cold stop still gives the outcomes already in hand this long to reach the database: a job
# that did finish is worth a moment, a rerun costs more.
COLD_WRITE_GRACE_S = 2.0


class Stopper:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        host: str,
        *,
        lifecycle: Lifecycle,
        attempts: InFlightAttempts,
        recorder: OutcomeRecorder,
        endings: AttemptEndings,
        supervisor: StackSupervisor | None,
        threads: SideThreads,
        executor: ThreadPoolExecutor,
        statements: StatementConnection,
        publish: Callable[[], None],
        closed: threading.Event,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.host = host
        self.lifecycle = lifecycle
        self.attempts = attempts
        self.recorder = recorder
        self._endings = endings
        self.supervisor = supervisor
        self.threads = threads
        self.executor = executor
        self._statements = statements
        self._publish_status = publish
        self._closed = closed  # set last: the heartbeat stops

    def drained(self) -> bool:
        """In-flight jobs done (or timed out) and every outcome written."""
        self._endings.expire_timed_out(self.recorder.submit)
        return self.attempts.busy == 0 and self.recorder.outstanding == 0

    def hand_back_queued(self) -> None:
        """Host to draining (unless an operator already chose its state), queued jobs back to
        pending for the other hosts. Retried while the database is away, until the stop turns
        cold."""
        wait_s = self.settings.consumer_poll_s
        while True:
            try:
                with transaction(self.engine) as conn:
                    store.set_host_state(
                        conn,
                        self.host,
                        HostState.DRAINING,
                        OWN_DRAIN_REASON,
                        expected=[HostState.ACTIVE],
                    )
                    handed = store.requeue_host_queued(
                        conn, self.host, f"requeued: consumer on {self.host} stopping"
                    )
                if handed:
                    log.info("handed %d queued job(s) back", len(handed))
                return
            except DatabaseUnavailable as exc:
                if self.lifecycle.cold:
                    log.warning("could not hand queued jobs back: %s", exc)
                    return
                log.warning("handing queued jobs back failed (%s); retrying", exc)
                if self.lifecycle.wait_cold(wait_s):
                    log.warning("could not hand queued jobs back before the cold stop")
                    return
                wait_s = min(wait_s * 2, DB_RETRY_MAX_S)

    def let_go_of_in_flight(self) -> None:
        """Cold stop: the jobs still running are not waited for. They end as after a crash
        (store.recover_host_jobs: back to pending with the attempt counted, failed on the last
        one), now if the database answers, else at the next start or by the producer's rescue.
        Their threads are counted as stuck; what they return is dropped."""
        let_go = self.attempts.let_go_all()
        self.recorder.close(COLD_WRITE_GRACE_S)  # outcomes already in hand, if it can
        if not let_go and self.recorder.outstanding == 0:
            return
        try:
            with transaction(self.engine) as conn:
                ended = store.recover_host_jobs(conn, self.host)
        except Exception as exc:
            log.warning(
                "cold stop: job(s) %s left processing (%s); the next start of this consumer,"
                " or the producer's rescue, sends them back",
                let_go,
                first_line(exc),
            )
            return
        log.warning(
            "cold stop: job(s) %s not waited for; %d interrupted attempt(s) ended as after a"
            " crash (back to pending, or failed on their last attempt)",
            let_go,
            len(ended),
        )

    def finish(self) -> None:
        self.lifecycle.request_stop("stopped")  # the loop ended by an exception: still a stop
        cold = self.lifecycle.cold
        self.recorder.close(COLD_WRITE_GRACE_S if cold else self.lifecycle.drain_left_s() + 1)
        if self.supervisor is not None:
            self.supervisor.close()
        try:
            with transaction(self.engine) as conn:
                # Jobs assigned while we drained, then the host offline if we drained it (an
                # operator's drain stays, so that a restarted consumer does not take work).
                store.requeue_host_queued(
                    conn, self.host, f"requeued: consumer on {self.host} stopped"
                )
                store.offline_after_own_drain(
                    conn, self.host, OWN_DRAIN_REASON, f"consumer stopped: {self.lifecycle.reason}"
                )
        except Exception as exc:
            log.warning("could not mark host %s offline: %s", self.host, first_line(exc))
        self.lifecycle.stopped()
        self._closed.set()
        self.threads.join(self.settings.consumer_poll_s + 1)
        self._publish_status()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._statements.close()
        if self.attempts.stuck:
            log.warning("%d job thread(s) still busy at exit, not waited for", self.attempts.stuck)
        log.info(
            "consumer %s stopped (%s%s)",
            self.host,
            self.lifecycle.reason,
            ", cold" if cold else "",
        )
