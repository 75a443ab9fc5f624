"""`scrapefleet submit` and the jobs' traces, as a real subprocess: --traceparent and
$TRACEPARENT, a line's own, a malformed one ignored (never refused), and with an OTLP endpoint
configured, the submit spans exported before the CLI exits."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common import tracing
from tests.cli_helpers import run_cli
from tests.otlp_receiver import serving

pytestmark = pytest.mark.e2e

CALLER = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
OWN = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"


def _traceparents(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT traceparent FROM jobs ORDER BY id")).scalars())


def _lines(*jobs: dict[str, object]) -> str:
    return "".join(json.dumps(j) + "\n" for j in jobs)


def test_a_malformed_traceparent_is_a_warning_and_the_jobs_go_in(
    engine: Engine, database_url: str
) -> None:
    text = _lines({"kind": "noop"}, {"kind": "noop", "traceparent": "00-nonsense"})
    done = run_cli(["submit", "--traceparent", "not-a-traceparent", "-"], database_url, stdin=text)
    assert done.returncode == 0, done.stderr
    assert "submitted 2 jobs" in done.stdout
    assert done.stderr.count("malformed traceparent") == 2, done.stderr
    stored = _traceparents(engine)
    assert len(stored) == 2 and all(tracing.is_traceparent(t) for t in stored)
    assert len(set(stored)) == 2  # a trace of its own each


def test_the_callers_traceparent_is_the_parent_and_a_lines_own_wins(
    engine: Engine, database_url: str
) -> None:
    text = _lines({"kind": "noop"}, {"kind": "noop", "traceparent": OWN})
    done = run_cli(["submit", "-"], database_url, stdin=text, TRACEPARENT=CALLER)
    assert done.returncode == 0, done.stderr
    assert _traceparents(engine) == [CALLER, OWN]  # tracing off here: stored as given


def test_with_an_endpoint_the_cli_exports_a_submit_span_per_job(
    engine: Engine, database_url: str
) -> None:
    with serving() as receiver:
        done = run_cli(
            ["submit", "-"],
            database_url,
            stdin=_lines({"kind": "noop"}, {"kind": "noop"}),
            TRACEPARENT=CALLER,
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url,
        )
        assert done.returncode == 0, done.stderr
        submits = receiver.named("scrapefleet.submit")  # sent at exit: the CLI waited for it
    assert len(submits) == 2
    assert {s.trace_id for s in submits} == {"ab" * 16}
    assert {s.parent_id for s in submits} == {"cd" * 8}
    assert {s.service for s in submits} == {"scrapefleet-client"}
    stored = _traceparents(engine)
    assert sorted(t.split("-")[2] for t in stored) == sorted(s.span_id for s in submits)
