"""An embedded PostgreSQL (the pgserver wheel) for the demo and for machines without a server."""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

from scrapefleet.common.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """Starts a private PostgreSQL 16 in a fresh directory under /tmp (pgserver opens read
    permission on the parents of its data directory, so it must not live under a home)."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.directory = Path(tempfile.mkdtemp(prefix="scrapefleet-pg-", dir="/tmp"))
        self._server: Any = None

    def start(self) -> str:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
                import pgserver
        except ImportError as exc:  # no wheel for this Python
            raise DatabaseUnavailable(f"embedded PostgreSQL unavailable: {exc}") from None
        self._server = pgserver.get_server(
            self.directory, cleanup_mode=None if self.keep else "delete"
        )
        return str(self._server.get_uri())

    def stop(self) -> None:
        if self._server is not None and not self.keep:
            self._server.cleanup()
            self._server = None
