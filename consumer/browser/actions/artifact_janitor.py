"""Removes failure artifacts past ``artifact_retention_days``, at start and then hourly.

A thread of its own: deleting many folders on a slow disk must delay neither claims nor
heartbeats.
"""

from __future__ import annotations

import logging
import threading

from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import ARTIFACT_PRUNE_INTERVAL_S
from scrapefleet.common.runtime import metrics
from scrapefleet.common.runtime.side_threads import SideThreads
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.actions.artifacts import prune_artifacts

log = logging.getLogger(__name__)


class ArtifactJanitor:
    def __init__(
        self,
        settings: Settings,
        stop: threading.Event,
        interval_s: float = ARTIFACT_PRUNE_INTERVAL_S,
    ) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self._stop = stop

    def start(self, threads: SideThreads) -> None:
        """Its thread, started and watched by ``threads``."""
        threads.start("artifact-janitor", self._run)

    def prune_once(self) -> int:
        try:
            removed = prune_artifacts(
                self.settings.artifacts_dir, self.settings.artifact_retention_days, utcnow()
            )
        except Exception:  # never the daemon's end; try again next round
            log.exception("pruning artifacts in %s failed", self.settings.artifacts_dir)
            return 0
        metrics.RETENTION_DELETED_ARTIFACT_DIRS.inc(removed)
        if removed:
            log.info(
                "removed the artifacts of %d job(s) older than %g days",
                removed,
                self.settings.artifact_retention_days,
            )
        return removed

    def _run(self) -> None:
        while True:
            self.prune_once()
            if self._stop.wait(self.interval_s):
                return
