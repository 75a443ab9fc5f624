"""Every statement that changes a job row or a host row, and nothing else.

Each job status change is one conditional UPDATE (``WHERE ... status = expected``), so two
actors can never both move the same job; the ``jobs_audit`` trigger writes a job_events row for
each change. Callers pass an open SQLAlchemy Connection inside their own transaction; these
functions never commit, so a caller can group several of them atomically.

One module per table or actor, each with its named statements at the top:

    statuses       JobStatus, HostState, the table of allowed transitions, exhaustion rules
    records        the record types that go in and come out
    operating.submit  insert_jobs, pin_jobs_to_host
    producing.assignment  the producer: lock pending jobs, assign them
    consuming.attempts  a consumer: claim, complete, fail, heartbeat
    consuming.releases  attempts and queued jobs handed back: release, recover, rescue, requeue
    consuming.blocks  a blocked attempt handed back (bounded), its host remembered
    operating.job_commands  cancel, retry, pause assignment
    operating.controls  live controls: one rate key, kind or crawl paused or limited, audited
    operating.hosts  registration, host states, an operator's host commands
    producing.probe_results  what the producer's probes learn
    consuming.stack_reports  a consumer's stack starts, restarts, reboots, faults
    producing.webhook_deliveries  delivery state
    producing.fleet  the producers' own rows: leader cycles, standby tries, stops
    producing.retention  the move to jobs_archive
    operating.roles  which database role has which duty (db_roles)
    events         the audit message and host_events rows
    operating.crawls  a crawl's start, and the children a completion spawns
    identity_pools.profiles  persistent browser profiles: bound, cooled, reset, moved
    identity_pools.proxies  proxy pools: leased per attempt (sticky sessions too), charged
    identity_pools.proxy_admin  proxy pools, the operator's: proxies added, disabled, reset, removed
    producing.rate_keys  rate limits: the budget's counts and back-off state
    producing.tight_budgets  the pending jobs assignable within the rate limits
    operating.schedules  recurring submissions: added, paused, removed; a slot claimed and its run

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
    "operating.submit",
    "producing.assignment",
    "consuming.attempts",
    "consuming.releases",
    "operating.job_commands",
    "operating.controls",
    "operating.hosts",
    "producing.probe_results",
    "consuming.stack_reports",
    "producing.webhook_deliveries",
    "producing.fleet",
    "producing.retention",
    "operating.roles",
    "events",
    "identity_pools.profiles",
    "identity_pools.proxies",
    "identity_pools.proxy_admin",
    "operating.crawls",
    "producing.rate_keys",
    "producing.tight_budgets",
    "consuming.blocks",
    "operating.schedules",
)

if TYPE_CHECKING:
    from scrapefleet.common.store.consuming.attempts import *
    from scrapefleet.common.store.consuming.blocks import *
    from scrapefleet.common.store.consuming.releases import *
    from scrapefleet.common.store.consuming.stack_reports import *
    from scrapefleet.common.store.events import *
    from scrapefleet.common.store.identity_pools.profiles import *
    from scrapefleet.common.store.identity_pools.proxies import *
    from scrapefleet.common.store.identity_pools.proxy_admin import *
    from scrapefleet.common.store.operating.controls import *
    from scrapefleet.common.store.operating.crawls import *
    from scrapefleet.common.store.operating.hosts import *
    from scrapefleet.common.store.operating.job_commands import *
    from scrapefleet.common.store.operating.roles import *
    from scrapefleet.common.store.operating.schedules import *
    from scrapefleet.common.store.operating.submit import *
    from scrapefleet.common.store.producing.assignment import *
    from scrapefleet.common.store.producing.fleet import *
    from scrapefleet.common.store.producing.probe_results import *
    from scrapefleet.common.store.producing.rate_keys import *
    from scrapefleet.common.store.producing.retention import *
    from scrapefleet.common.store.producing.tight_budgets import *
    from scrapefleet.common.store.producing.webhook_deliveries import *
    from scrapefleet.common.store.records import *
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
