"""The one clock: timezone-aware UTC. Tests inject their own ``now`` where a decision needs it."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
