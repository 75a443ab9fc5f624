"""How a browser job is kept apart from the jobs that ran before it on the same host: a ladder
of three levels, each giving the job more of the browser fresh, at a higher price.

- ``"cleared"`` (the default): the slot's warm user context and tab, cleared after every job
  (consumer.browser.context_clearing): every cookie, and the localStorage, sessionStorage,
  IndexedDB, Cache Storage and service workers of the origin the job's pages were on. The HTTP cache
  and the site's renderer stay, as in one browser visiting many pages: a page that shares its
  CSS and scripts with the last one does not fetch them again. A job whose pages went to
  more than one origin, framed another origin or opened windows gets a fresh user context
  instead, as does a job with browser options (they are set per user context);
- ``"context"``: a fresh WebDriver BiDi user context in a warm browser: cookies, storage, HTTP
  cache and service workers of its own, removed after the job (a new window and an empty cache:
  every page fetches its CSS and scripts again);
- ``"session"``: a browser of its own, started for the job and quit after it (a job that needs
  a clean browser process).

A job asks with the payload key ``isolation``; an action with ``register(..., isolation=)``.
A job's browser options (payload key ``browser``: a proxy, a user agent, a locale...) never
need ``"session"``: Chromium takes each of them per user context (consumer.browser.job_setup).
A persistent profile's job runs in a browser of its own whatever it asks.
"""

from __future__ import annotations

from typing import Literal, get_args

Isolation = Literal["cleared", "context", "session"]
ISOLATION_VALUES: tuple[Isolation, ...] = get_args(Isolation)
DEFAULT_ISOLATION: Isolation = "cleared"
ISOLATION_KEY = "isolation"  # the payload key a browser job may set


def validate_isolation(value: object) -> Isolation:
    """``value`` as an Isolation, or ValueError naming the allowed values."""
    for allowed in ISOLATION_VALUES:
        if value == allowed:
            return allowed
    raise ValueError(f"isolation must be one of {', '.join(ISOLATION_VALUES)} (got {value!r})")


def with_options(isolation: Isolation, has_options: bool) -> Isolation:
    """The level a job runs at: browser options are set on the user context (a user agent, a
    locale, headers, a proxy) or its tab (a viewport, blocked URLs), and clearing would leave
    them for the next job, so a job with options gets a fresh context at least."""
    if isolation == "cleared" and has_options:
        return "context"
    return isolation
