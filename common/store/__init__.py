"""Every statement that changes a job row or a host row, and nothing else.

Each job status change is one conditional UPDATE (``WHERE ... status = expected``), so two
actors can never both move the same job; the ``jobs_audit`` trigger writes a job_events row for
each change. Callers pass an open SQLAlchemy Connection inside their own transaction; these
functions never commit, so a caller can group several of them atomically.

One module per table or actor, each with its named statements at the top:

    statuses       JobStatus, HostState, the table of allowed transitions, exhaustion rules
    records        the record types that go in and come out
    submit         insert_jobs, pin_jobs_to_host
    assignment     the producer: lock pending jobs, assign them
    attempts       a consumer: claim, complete, fail, heartbeat
    releases       attempts and queued jobs handed back: release, recover, rescue, requeue
    blocks         a blocked attempt handed back (bounded), its host remembered
    operator       cancel, retry, pause assignment
    controls       live controls: one rate key, kind or crawl paused or limited, audited
    hosts          registration, host states, an operator's host commands
    probes         what the producer's probes learn
    browser_stack  a consumer's stack starts, restarts, reboots, faults
    webhooks       delivery state
    fleet          the producers' own rows: leader cycles, standby tries, stops
    retention      the move to jobs_archive
    roles          which database role has which duty (db_roles)
    events         the audit message and host_events rows
    crawls         a crawl's start, and the children a completion spawns
    profiles       persistent browser profiles: bound, cooled, reset, moved
    proxies        proxy pools: leased per attempt (sticky sessions too), charged
    proxy_admin    proxy pools, the operator's: proxies added, disabled, reset, removed
    rate_keys      rate limits: the budget's counts and back-off state
    tight_budgets  the pending jobs assignable within the rate limits
    schedules      recurring submissions: added, paused, removed; a slot claimed and its run

Every public name of those modules (its ``__all__``) is importable from here
(``store.insert_jobs``, ``from scrapefleet.common.store import NewJob``). The modules load on
first use: importing ``scrapefleet.common.store.statuses`` alone loads no SQLAlchemy.
"""

# ruff: noqa: F403  (the package's names are its modules' __all__, re-exported)

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from scrapefleet.common.store.statuses import *  # cheap: enums and plain strings

# A module's public names are its ``__all__``, and nothing else lists them: a new function is
# exported by naming it there. A new module is named here and below (the type checker reads
# the imports; a test holds the two to each other).
MODULES = (
    "records",
    "submit",
    "assignment",
    "attempts",
    "releases",
    "operator",
    "controls",
    "hosts",
    "probes",
    "browser_stack",
    "webhooks",
    "fleet",
    "retention",
    "roles",
    "events",
    "profiles",
    "proxies",
    "proxy_admin",
    "crawls",
    "rate_keys",
    "tight_budgets",
    "blocks",
    "schedules",
)

if TYPE_CHECKING:
    from scrapefleet.common.store.assignment import *
    from scrapefleet.common.store.attempts import *
    from scrapefleet.common.store.blocks import *
    from scrapefleet.common.store.browser_stack import *
    from scrapefleet.common.store.controls import *
    from scrapefleet.common.store.crawls import *
    from scrapefleet.common.store.events import *
    from scrapefleet.common.store.fleet import *
    from scrapefleet.common.store.hosts import *
    from scrapefleet.common.store.operator import *
    from scrapefleet.common.store.probes import *
    from scrapefleet.common.store.profiles import *
    from scrapefleet.common.store.proxies import *
    from scrapefleet.common.store.proxy_admin import *
    from scrapefleet.common.store.rate_keys import *
    from scrapefleet.common.store.records import *
    from scrapefleet.common.store.releases import *
    from scrapefleet.common.store.retention import *
    from scrapefleet.common.store.roles import *
    from scrapefleet.common.store.schedules import *
    from scrapefleet.common.store.submit import *
    from scrapefleet.common.store.tight_budgets import *
    from scrapefleet.common.store.webhooks import *
else:

    def __getattr__(name: str) -> object:
        """The first use of a name loads the module that defines it (PEP 562)."""
        if name.startswith("__"):
            raise AttributeError(name)
        for module_name in MODULES:
            module = importlib.import_module(f"{__name__}.{module_name}")
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
