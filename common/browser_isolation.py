"""How a browser job is kept apart from the jobs that ran before it on the same host.

- ``"context"`` (the default): a fresh WebDriver BiDi user context in a warm browser: cookies,
  localStorage, IndexedDB, HTTP cache and service workers of its own, removed after the job;
- ``"session"``: a browser of its own, started for the job and quit after it (slower: for a
  job that needs a clean browser process).

A job asks with the payload key ``isolation``; an action with ``register(..., isolation=)``.
A job's browser options (payload key ``browser``: a proxy, a user agent, a locale...) never
need ``"session"``: Chromium takes each of them per user context (consumer.browser_options).
"""

from __future__ import annotations

from typing import Literal, get_args

Isolation = Literal["context", "session"]
ISOLATION_VALUES: tuple[Isolation, ...] = get_args(Isolation)
DEFAULT_ISOLATION: Isolation = "context"
ISOLATION_KEY = "isolation"  # the payload key a browser job may set


def validate_isolation(value: object) -> Isolation:
    """``value`` as an Isolation, or ValueError naming the allowed values."""
    for allowed in ISOLATION_VALUES:
        if value == allowed:
            return allowed
    raise ValueError(f"isolation must be one of {', '.join(ISOLATION_VALUES)} (got {value!r})")
