"""The table of allowed transitions and the store package's shape, without a database."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from scrapefleet.common import store
from scrapefleet.common.store import statuses
from scrapefleet.common.store.statuses import (
    FINISHED,
    TRANSITIONS,
    Actor,
    HostState,
    JobStatus,
    attempts_exhausted,
    host_transitions,
    job_transitions,
    sources,
    sql_list,
)

pytestmark = pytest.mark.timeout(30)

STORE_INIT = Path(store.__file__)

# Every public name the store had before it was split into modules: callers import them from
# the package, and none of them may have to change.
NAMES_BEFORE_THE_SPLIT = [
    "ARCHIVE_BATCH_SQL",
    "CLAIM_SQL",
    "Claim",
    "ClaimedJob",
    "DueWebhook",
    "HostSpec",
    "InsertResult",
    "JobFilter",
    "LOCK_PENDING_NO_BROWSER_SQL",
    "LOCK_PENDING_SQL",
    "NewJob",
    "PendingJob",
    "RELEASES_EXHAUSTED",
    "RELEASE_SQL",
    "Registration",
    "add_host",
    "archive_finished_jobs",
    "assign_jobs",
    "begin_stack_lifetime",
    "cancel_jobs",
    "claim_jobs",
    "complete_job",
    "complete_jobs",
    "drain_host",
    "enable_host",
    "fail_attempt",
    "heartbeat",
    "insert_jobs",
    "lock_pending_jobs",
    "reactivate_after_own_drain",
    "record_host_event",
    "record_probe_failure",
    "record_probe_success",
    "record_reboot_request",
    "record_stack_failure",
    "record_webhook_delivered",
    "record_webhook_failed",
    "recover_host_jobs",
    "register_consumer",
    "release_job",
    "remove_host",
    "requeue_from_unavailable_hosts",
    "requeue_host_queued",
    "rescue_stale_processing",
    "reset_restart_counter",
    "retry_jobs",
    "set_assignment_paused",
    "set_host_state",
    "take_due_webhooks",
]


def test_every_function_in_the_table_is_a_store_function() -> None:
    for transition in TRANSITIONS:
        function = getattr(store, transition.function)
        assert inspect.isfunction(function), transition
        assert function.__module__.startswith("scrapefleet.common.store."), transition


def test_every_status_is_reached_and_every_unfinished_one_is_left() -> None:
    for status in [*JobStatus, *HostState]:
        assert any(t.target == status for t in TRANSITIONS), f"nothing moves into {status}"
        assert any(t.source == status for t in TRANSITIONS), f"nothing moves out of {status}"
    assert {t.target for t in TRANSITIONS if t.source is None} == {
        JobStatus.PENDING,
        HostState.ACTIVE,
    }


def test_finished_jobs_leave_only_for_the_archive_or_an_operator_retry() -> None:
    for transition in job_transitions():
        if transition.source == JobStatus.COMPLETED:
            assert transition.target is None and transition.function == "archive_finished_jobs"
        elif transition.source in FINISHED and transition.target is not None:
            assert transition.actor is Actor.OPERATOR and transition.function == "retry_jobs"


def test_only_a_claim_starts_an_attempt_and_only_its_host_ends_one() -> None:
    into_processing = {t.function for t in job_transitions() if t.target == JobStatus.PROCESSING}
    assert into_processing == {"claim_jobs"}
    for transition in job_transitions():
        if transition.source == JobStatus.PROCESSING:
            # Its consumer, the producer's rescue of a consumer that went silent, or an
            # operator's stop (the host then gives the attempt up at its next heartbeat).
            assert transition.actor is Actor.CONSUMER or transition.function in (
                "rescue_stale_processing",
                "stop_jobs",
            ), transition


def test_only_an_operator_disables_a_host_or_brings_it_back() -> None:
    for transition in host_transitions():
        if HostState.DISABLED in (transition.source, transition.target):
            assert transition.actor is Actor.OPERATOR, transition


def test_the_table_has_no_duplicate_row() -> None:
    assert len(set(TRANSITIONS)) == len(TRANSITIONS)


def test_sources_give_a_statement_its_where_list() -> None:
    assert sources("cancel_jobs", JobStatus.CANCELLED) == (JobStatus.PENDING, JobStatus.QUEUED)
    assert sources("retry_jobs", JobStatus.PENDING) == (JobStatus.FAILED, JobStatus.CANCELLED)
    assert sources("archive_finished_jobs", None) == FINISHED
    assert sql_list(sources("cancel_jobs", JobStatus.CANCELLED)) == "('pending', 'queued')"
    with pytest.raises(LookupError):
        sources("cancel_jobs", JobStatus.FAILED)
    with pytest.raises(LookupError):  # creation has no source status to put in a WHERE
        sources("insert_jobs", JobStatus.PENDING)
    with pytest.raises(ValueError):
        sql_list(["pending", "x') OR (true"])


def test_the_statements_spell_statuses_from_the_enums() -> None:
    assert "status IN ('pending', 'queued')" in store.CANCEL_SQL.text
    # A retry takes failed jobs; cancelled ones only when the operator says so.
    assert "status IN ('failed')" in store.RETRY_SQL.text
    assert "status IN ('failed', 'cancelled')" in store.RETRY_INCLUDING_CANCELLED_SQL.text
    assert "status IN ('completed', 'failed', 'cancelled')" in store.ARCHIVE_BATCH_SQL.text


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "exhausted"),
    [(1, 3, False), (2, 3, False), (3, 3, True), (4, 3, True), (1, 1, True)],
)
def test_attempts_exhausted(attempt: int, max_attempts: int, exhausted: bool) -> None:
    assert attempts_exhausted(attempt, max_attempts) is exhausted


def test_the_archive_keeps_every_column_of_jobs() -> None:
    from scrapefleet.common.db import job_tables

    assert set(store.ARCHIVED_COLUMNS) == set(job_tables.jobs.c.keys())
    assert "releases" in store.ARCHIVED_COLUMNS


def test_every_name_from_before_the_split_is_importable() -> None:
    missing = [name for name in NAMES_BEFORE_THE_SPLIT if not hasattr(store, name)]
    assert not missing


def _type_checking_modules() -> list[str]:
    """The modules whose ``__all__`` the type checker reads as the package's (``import *``)."""
    tree = ast.parse(STORE_INIT.read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imports = [node for node in guarded.body if isinstance(node, ast.ImportFrom)]
    assert all([alias.name for alias in node.names] == ["*"] for node in imports)
    return [str(node.module).removeprefix("scrapefleet.common.store.") for node in imports]


def test_the_type_checkers_view_of_the_package_is_what_it_exports() -> None:
    exported = set()
    for name in store.MODULES:
        module = importlib.import_module(f"scrapefleet.common.store.{name}")
        for public in module.__all__:
            assert getattr(store, public) is getattr(module, public)
        overlap = exported & set(module.__all__)
        assert not overlap, f"{name} exports names another module exports: {overlap}"
        exported |= set(module.__all__)
    assert sorted(_type_checking_modules()) == sorted(store.MODULES)
    assert not set(statuses.__all__) & exported
    with pytest.raises(AttributeError):
        _ = store.no_such_function


def test_the_statuses_load_without_sqlalchemy() -> None:
    """So that a command that only needs the names (the consumer's status, once per probe over
    SSH) stays fast."""
    code = (
        "import sys\n"
        "from scrapefleet.common.store.statuses import HostState\n"
        "assert 'sqlalchemy' not in sys.modules, 'statuses loaded SQLAlchemy'\n"
        "from scrapefleet.common.store import JobStatus\n"
        "assert 'sqlalchemy' not in sys.modules, 'the package loaded SQLAlchemy'\n"
    )
    _run_in_a_fresh_interpreter(code)


def test_the_admin_clis_help_loads_no_database_layer() -> None:
    """`scrapefleet --help` (and every command's definition) needs click and the command
    table only: a help text or a default computed from the database layer at import time
    would cost ~0.15 s of CPU on every invocation."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from scrapefleet.common.ops.cli import cli\n"
        "result = CliRunner().invoke(cli, ['jobs', 'retry', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = {'sqlalchemy', 'psycopg', 'pydantic', 'selenium', 'flask'} & set(sys.modules)\n"
        "assert not heavy, f'--help loaded {sorted(heavy)}'\n"
    )
    _run_in_a_fresh_interpreter(code)


def _run_in_a_fresh_interpreter(code: str) -> None:
    """``code`` in a new Python, where sys.modules starts empty: its asserts pass or fail it."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
