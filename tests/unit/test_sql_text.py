"""Named statements: whole texts, their statuses taken from the enums when the module loads."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from scrapefleet.common.browser.profile_names import ProfileState
from scrapefleet.common.constants import RATE_WINDOW_S
from scrapefleet.common.db import job_tables
from scrapefleet.common.reads import crawl_figures as crawl_reads
from scrapefleet.common.reads import (
    kind_waits,
    producer_status,
    progress,
    queries,
    results,
)
from scrapefleet.common.reads import live_control_rows as control_reads
from scrapefleet.common.reads import schedule_rows as schedule_reads
from scrapefleet.common.store import events
from scrapefleet.common.store.consuming import attempts, blocks
from scrapefleet.common.store.consuming import stack_reports as browser_stack
from scrapefleet.common.store.identity_pools import profiles
from scrapefleet.common.store.operating import controls, crawls, hosts, roles, schedules, submit
from scrapefleet.common.store.operating import job_commands as operator
from scrapefleet.common.store.producing import (
    assignment,
    fleet,
    rate_keys,
    retention,
    tight_budgets,
)
from scrapefleet.common.store.producing import probe_results as probes
from scrapefleet.common.store.producing import webhook_deliveries as webhooks
from scrapefleet.common.store.sql_text import fill, statement
from scrapefleet.common.store.statuses import HostState, JobStatus, sources, sql_list

pytestmark = pytest.mark.timeout(10)


def test_statuses_are_filled_in_from_the_enums() -> None:
    text = fill("status = {job.processing} AND state = {host.active} AND s IN {in_flight}")
    assert text == (
        f"status = '{JobStatus.PROCESSING}' AND state = '{HostState.ACTIVE}'"
        " AND s IN ('queued', 'processing')"
    )
    assert fill("{unfinished}") == "('pending', 'queued', 'processing')"


def test_a_profiles_state_is_filled_in_from_its_enum() -> None:
    assert fill("state = {profile.cooling}") == f"state = '{ProfileState.COOLING}'"


def test_an_unknown_status_stops_the_load() -> None:
    with pytest.raises(KeyError, match=r"\{job\.procesing\}"):
        statement("SELECT 1 FROM jobs WHERE status = {job.procesing}")


def test_array_literals_and_parameters_are_left_alone() -> None:
    assert fill("SELECT '{}'::int[], :host") == "SELECT '{}'::int[], :host"


def _named(module: object) -> dict[str, sa.TextClause]:
    return {
        name: value
        for name, value in vars(module).items()
        if name.endswith("_SQL") and isinstance(value, sa.TextClause)
    }


MODULES = [
    attempts,
    assignment,
    rate_keys,
    tight_budgets,
    hosts,
    profiles,
    fleet,
    submit,
    blocks,
    operator,
    crawls,
    retention,
    schedules,
    webhooks,
    queries,
    results,
    kind_waits,
    producer_status,
    progress,
    probes,
    controls,
    events,
    roles,
    browser_stack,
    control_reads,
    crawl_reads,
    schedule_reads,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_placeholder_is_left_in_a_statement(module: object) -> None:
    statements = _named(module)
    assert statements
    for name, clause in statements.items():
        assert not re.search(r"\{[a-z_.]+\}", clause.text), name


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_comment_in_a_statement_names_a_parameter(module: object) -> None:
    # SQLAlchemy reads ``:word`` as a parameter wherever it is, SQL comments included.
    for name, clause in _named(module).items():
        for comment in re.findall(r"--[^\n]*", clause.text):
            assert not sa.text(comment)._bindparams, f"{name}: {comment}"


def test_the_pending_reads_read_the_ready_view_with_the_holds_word_for_word() -> None:
    # The view ready_jobs holds what makes a pending job ready; the holds are parameters.
    for clause in (
        assignment.LOCK_PENDING_SQL,
        assignment.LOCK_PENDING_NO_BROWSER_SQL,
        tight_budgets.TIGHT_KEYS_SQL,
        tight_budgets.TIGHT_KINDS_SQL,
    ):
        assert "\nFROM ready_jobs\nWHERE " in clause.text
        assert assignment.HELD_NOW in clause.text
        assert assignment.PENDING_COLUMNS.strip() in clause.text
        assert "FROM jobs" not in clause.text


def test_the_rate_window_is_the_constant_written_out() -> None:
    # A literal, not a parameter (the producer's generic plan is estimated on it).
    assert f"make_interval(secs => {RATE_WINDOW_S!r})" in rate_keys.RATE_WINDOW_SQL.text


def _column_list(text: str, before: str) -> list[str]:
    listed = re.search(re.escape(before) + r" \(([^)]*)\)", text)
    assert listed, before
    return [name.strip() for name in listed.group(1).split(",")]


def test_the_staging_table_is_the_submitted_columns_with_the_types_of_jobs() -> None:
    dialect = postgresql.dialect()
    jobs = job_tables.jobs
    types = {name: jobs.c[name].type.compile(dialect=dialect) for name in submit.SUBMITTED_COLUMNS}
    body = re.search(r"incoming_jobs \((.*)\) ON COMMIT DROP", submit.CREATE_STAGING_SQL.text, re.S)
    assert body
    staged = [column.strip() for column in body.group(1).split(",")]
    assert staged == ["seq int", *(f"{name} {types[name]}" for name in submit.SUBMITTED_COLUMNS)]
    columns = list(submit.SUBMITTED_COLUMNS)
    assert _column_list(submit.COPY_STAGING, "COPY incoming_jobs") == ["seq", *columns]
    assert _column_list(submit.INSERT_FROM_STAGING_SQL.text, "INSERT INTO jobs") == columns


def test_an_operators_statements_move_their_transitions_sources_with_its_filter() -> None:
    cancelled = JobStatus.CANCELLED
    for clause, moved in (
        (operator.CANCEL_SQL, operator.CANCEL_SOURCES),
        (operator.STOP_SQL, sources("stop_jobs", cancelled)),
        (operator.RETRY_SQL, operator.retry_sources(include_cancelled=False)),
        (operator.RETRY_INCLUDING_CANCELLED_SQL, operator.retry_sources(include_cancelled=True)),
    ):
        assert f"WHERE status IN {sql_list(moved)}" in clause.text
    for clause in (operator.CANCEL_SQL, operator.RETRY_SQL, operator.RETRY_INCLUDING_CANCELLED_SQL):
        assert operator.JOB_FILTER_SQL in clause.text


def test_the_archive_moves_every_shared_column_of_the_finished_jobs() -> None:
    text = retention.ARCHIVE_BATCH_SQL.text
    assert f"status IN {sql_list(sources('archive_finished_jobs', None))}" in text
    columns = list(retention.ARCHIVED_COLUMNS)
    returned = re.search(r"RETURNING (.*?)\n\)", text, re.S)
    selected = re.search(r"\nSELECT (.*?)\nFROM moved", text, re.S)
    assert returned and selected
    assert [c.strip() for c in returned.group(1).split(",")] == columns
    assert _column_list(text, "INSERT INTO jobs_archive") == columns
    assert [c.strip() for c in selected.group(1).split(",")] == columns


def test_the_reads_hold_what_they_share_word_for_word() -> None:
    # queries.fleet_snapshot builds HostRows by position from the columns after the third.
    host_columns = re.search(r"SELECT (.*?)\nFROM", queries.HOSTS_SQL.text, re.S)
    assert host_columns
    assert host_columns.group(1) in queries.FLEET_SNAPSHOT_SQL.text
    assert operator.JOB_FILTER_SQL in queries.JOBS_MATCHING_BY_STATUS_SQL.text


def test_the_result_reads_call_the_filter_function_with_every_part() -> None:
    params = set(results.ResultFilter().params())
    assert set(sa.text(results.MATCHING_JOBS_SQL)._bindparams) == params
    for clause in (results.LIST_RESULTS_SQL, results.EXPORT_RESULTS_SQL, results.COUNT_RESULTS_SQL):
        assert f"FROM {results.MATCHING_JOBS_SQL}\n" in clause.text + "\n"
        assert "jobs_archive" not in clause.text
    assert "FROM jobs_with_archive" in results.RESULTS_OF_SQL.text
