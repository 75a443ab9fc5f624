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

Every public name of those modules is importable from here (``store.insert_jobs``,
``from scrapefleet.common.store import NewJob``). The modules load on first use: importing
``scrapefleet.common.store.statuses`` alone loads no SQLAlchemy.
"""

# ruff: noqa: F401  (the names under TYPE_CHECKING are this package's re-exports)

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from scrapefleet.common.store.statuses import *  # noqa: F403  (cheap: enums and plain strings)

# Listed again under TYPE_CHECKING for the type checker; a test holds the two to each other.
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
    from scrapefleet.common.store.assignment import (
        ASSIGN_SQL,
        LOCK_PENDING_NO_BROWSER_SQL,
        LOCK_PENDING_SQL,
        PENDING_COLUMNS,
        READY_NOW,
        assign_jobs,
        lock_pending_jobs,
        pending_jobs,
    )
    from scrapefleet.common.store.attempts import (
        CLAIM_SQL,
        COMPLETE_MANY_SQL,
        COMPLETE_SQL,
        FAIL_ATTEMPT_SQL,
        attempts_ended,
        claim_jobs,
        complete_job,
        complete_jobs,
        fail_attempt,
        heartbeat,
    )
    from scrapefleet.common.store.blocks import BLOCKED_SQL, release_blocked
    from scrapefleet.common.store.browser_stack import (
        SET_STACK_COUNTER_SQL,
        begin_stack_lifetime,
        record_reboot_request,
        record_stack_failure,
        reset_restart_counter,
    )
    from scrapefleet.common.store.controls import (
        NO_HOLDS,
        ControlChange,
        Holds,
        LiveControl,
        LiveControls,
        Scope,
        change_control,
        live_controls,
        scope_words,
        unchanged_words,
    )
    from scrapefleet.common.store.crawls import (
        SPAWN_SQL,
        START_CRAWL_SQL,
        spawn_children,
        start_crawl,
    )
    from scrapefleet.common.store.events import (
        INSERT_HOST_EVENT_SQL,
        SET_AUDIT_MESSAGE_SQL,
        record_host_event,
        set_audit_message,
    )
    from scrapefleet.common.store.fleet import (
        LEADER_CYCLE_SQL,
        PRUNE_PRODUCERS_SQL,
        REGISTER_PRODUCER_SQL,
        SAVE_FLEET_LIMITS_SQL,
        STANDBY_TRY_SQL,
        STOPPED_SQL,
        ProducerIdentity,
        ProducerRole,
        prune_producers,
        record_leader_cycle,
        record_producer_stopped,
        record_standby_try,
        register_producer,
        save_fleet_limits,
    )
    from scrapefleet.common.store.hosts import (
        ADD_HOST_SQL,
        SET_HOST_STATE_SQL,
        add_host,
        drain_host,
        enable_host,
        offline_after_own_drain,
        reactivate_after_own_drain,
        register_consumer,
        remove_host,
        set_host_state,
    )
    from scrapefleet.common.store.operator import (
        CANCEL_SOURCES,
        CANCEL_SQL,
        JOB_FILTER_SQL,
        RETRY_INCLUDING_CANCELLED_SQL,
        RETRY_SQL,
        SET_ASSIGNMENT_PAUSED_SQL,
        STOP_SQL,
        cancel_jobs,
        retry_jobs,
        retry_sources,
        set_assignment_paused,
        stop_jobs,
    )
    from scrapefleet.common.store.probes import (
        PROBE_FAILED_SQL,
        PROBE_SUCCEEDED_SQL,
        PROBES_SUCCEEDED_SQL,
        record_probe_failure,
        record_probe_success,
        record_probe_successes,
    )
    from scrapefleet.common.store.profiles import (
        BIND_PROFILES_SQL,
        COOL_AFTER_BLOCK_SQL,
        ProfileBusy,
        ProfileRow,
        bind_profiles,
        cool_profile,
        cool_profile_after_block,
        list_profiles,
        move_profile,
        profile_rows,
        profile_succeeded,
        reset_profile,
    )
    from scrapefleet.common.store.proxies import (
        LEASE_SQL,
        PRUNE_LEASES_SQL,
        LeasedProxy,
        ProxyRow,
        SessionRow,
        StoredSession,
        charge_identity,
        keep_session,
        known_pools,
        lease_identities,
        proxy_for_attempt,
        proxy_rows,
        prune_identity_leases,
        session_for_attempt,
        session_rows,
    )
    from scrapefleet.common.store.proxy_admin import (
        ADD_PROXY_SQL,
        NO_CHANGE,
        POOL_SETTINGS,
        ProxyBusy,
        add_proxies,
        list_pools,
        list_proxies,
        remove_proxies,
        reset_proxies,
        set_pool,
        set_proxies_disabled,
    )
    from scrapefleet.common.store.rate_keys import (
        RATE_IN_FLIGHT_SQL,
        RATE_WINDOW_SQL,
        THROTTLES_SQL,
        in_flight_counts,
        rate_slowdowns,
        save_rate_keys,
        throttles_since,
        window_counts,
    )
    from scrapefleet.common.store.records import (
        Claim,
        ClaimedJob,
        DueWebhook,
        Heartbeat,
        HostSpec,
        InsertResult,
        JobFilter,
        NewJob,
        PendingJob,
        Registration,
        bounded_error,
    )
    from scrapefleet.common.store.releases import (
        RECOVER_SQL,
        RELEASE_SQL,
        REQUEUE_FROM_UNAVAILABLE_SQL,
        REQUEUE_HOST_BROWSER_SQL,
        REQUEUE_HOST_SQL,
        RESCUE_SQL,
        recover_host_jobs,
        release_job,
        requeue_from_unavailable_hosts,
        requeue_host_browser_jobs,
        requeue_host_queued,
        rescue_stale_processing,
    )
    from scrapefleet.common.store.retention import (
        ARCHIVE_BATCH_SQL,
        ARCHIVED_COLUMNS,
        archive_finished_jobs,
    )
    from scrapefleet.common.store.roles import (
        FORGET_DB_ROLE_SQL,
        REGISTER_DB_ROLE_SQL,
        forget_db_role,
        register_db_role,
    )
    from scrapefleet.common.store.schedules import (
        ADD_SCHEDULE_SQL,
        CLAIM_SLOT_SQL,
        RECORD_RUN_SQL,
        DueSchedule,
        ScheduleSpec,
        add_schedule,
        claim_slot,
        due_schedules,
        jobs_of,
        last_run_unfinished,
        record_run,
        remove_schedule,
        set_schedule_paused,
    )
    from scrapefleet.common.store.submit import (
        CREATE_STAGING_SQL,
        INSERT_FROM_STAGING_SQL,
        PIN_TO_HOST_SQL,
        SUBMITTED_COLUMNS,
        insert_jobs,
        pin_jobs_to_host,
    )
    from scrapefleet.common.store.tight_budgets import (
        TIGHT_KEYS_SQL,
        TIGHT_KINDS_SQL,
        lock_pending_within_limits,
    )
    from scrapefleet.common.store.webhooks import (
        DELIVERED_SQL,
        DELIVERY_FAILED_SQL,
        TAKE_DUE_WEBHOOKS_SQL,
        record_webhook_delivered,
        record_webhook_failed,
        take_due_webhooks,
    )
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
