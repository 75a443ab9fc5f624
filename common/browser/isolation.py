"""How a browser job is kept apart from the jobs that ran before it on the same host: a ladder
of four levels, each giving the job more of the browser fresh, at a higher price.

- ``"shared"``: nothing is kept apart. Each slot (a worker) keeps one user context and tab for
  its session's lifetime, and nothing is cleared between its jobs: cookies, storage, the HTTP
  cache, the page left open, as one person browsing. For anonymous work, such as a crawl of one
  site. It does NOT guarantee that a job starts clean: a job sees what earlier jobs on the same
  slot stored (a login, a cart, a consent cookie, a site's rate-limit or tracking state), may
  find the last job's page still running its scripts until it navigates, and shares its
  identity (cookies, fingerprint) with them; which earlier jobs those were depends on the slot
  it lands on. The context ends with its session (a browser retired, the stack restarted), or
  when a job closes its tab or opens another window. A slot that ran a ``"shared"`` job gives
  a job of another level a fresh user context. Refused at submit together with browser options
  or a profile (they are set per job; a shared context would carry them to the next job);
- ``"cleared"`` (the default): the slot's warm user context and tab, cleared after every job
  (consumer.browser.sessions.context_clearing): every cookie, and the localStorage, sessionStorage,
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
need ``"session"``: Chromium takes each of them per user context
(consumer.browser.actions.job_setup). A persistent profile's job runs in a browser of its own
whatever it asks.
"""

from __future__ import annotations

from typing import Literal, get_args

Isolation = Literal["shared", "cleared", "context", "session"]
ISOLATION_VALUES: tuple[Isolation, ...] = get_args(Isolation)
DEFAULT_ISOLATION: Isolation = "cleared"
ISOLATION_KEY = "isolation"  # the payload key a browser job may set


def validate_isolation(value: object) -> Isolation:
    """``value`` as an Isolation, or ValueError naming the allowed values."""
    for allowed in ISOLATION_VALUES:
        if value == allowed:
            return allowed
    raise ValueError(f"isolation must be one of {', '.join(ISOLATION_VALUES)} (got {value!r})")


SHARED_WITH_OPTIONS = (
    "isolation 'shared' cannot be asked with browser options or a profile: they are set on the"
    " job's own user context, and a shared one carries them to the jobs after it (use 'cleared')"
)


def check_shared(isolation: Isolation, has_options: bool) -> None:
    """ValueError with the reason when a job asks ``"shared"`` together with its own browser
    options (a profile is one)."""
    if isolation == "shared" and has_options:
        raise ValueError(SHARED_WITH_OPTIONS)


def with_options(isolation: Isolation, has_options: bool) -> Isolation:
    """The level a job runs at: browser options are set on the user context (a user agent, a
    locale, headers, a proxy) or its tab (a viewport, blocked URLs), and clearing would leave
    them for the next job, so a job with options (the host's own defaults included) gets a
    fresh context at least."""
    if isolation in ("shared", "cleared") and has_options:
        return "context"
    return isolation
