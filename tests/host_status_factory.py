"""A valid consumer status document for tests and benchmarks, with any field overridden."""

from __future__ import annotations

import time
import uuid
from typing import Any

from scrapefleet.common.status.document import HostStatus


def status_for(host: str, **fields: Any) -> HostStatus:
    """An idle, active host with plenty of memory and a running daemon, written now, unless
    ``fields`` say otherwise."""
    values: dict[str, Any] = {
        "host": host,
        "running": 0,
        "capacity": 6,
        "state": "active",
        "boot_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, host)),
        "jobs_since_restart": 0,
        "jobs_since_boot": 0,
        "memory_available_bytes": 6 << 30,
        "memory_total_bytes": 8 << 30,
        "load_1m": 0.1,
        "pid": 4242,
        "updated_at": time.time(),
        "daemon": "running",
    }
    return HostStatus(**{**values, **fields})
