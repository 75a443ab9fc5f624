"""Retention: old finished jobs move to jobs_archive in batches, nothing lost; artifacts pruned."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.store import NewJob
from scrapefleet.producer.background.retention_sweep import run_retention
from tests.integration.producer_helpers import producer_settings, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()


def test_archive_moves_rows_without_losing_any(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    ids = submit(engine, [NewJob("noop", {"n": i}) for i in range(2500)])
    with engine.begin() as conn:
        # 2,300 finished long ago in each final status, 100 finished recently, 100 unfinished.
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = (ARRAY['completed', 'failed', 'cancelled'])[id % 3 + 1],"
                " finished_at = now() - interval '40 days' WHERE id <= 2300"
            )
        )
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'completed', finished_at = now() - interval '1 day'"
                " WHERE id > 2300 AND id <= 2400"
            )
        )
    before = count(engine, "jobs")
    with engine.connect() as conn:
        snapshot = conn.execute(sa.text("SELECT id, status, payload FROM jobs ORDER BY id")).all()
    settings = producer_settings(
        database_url,
        tmp_path,
        retention_days=30,
        retention_batch_rows=1000,
        artifacts_dir=tmp_path / "artifacts",
    )

    # A concurrent writer keeps touching hot rows while the archive runs: it never blocks.
    stop = threading.Event()
    added: list[int] = []

    def keep_submitting() -> None:
        while not stop.is_set():
            added.extend(submit(engine, [NewJob("noop")]))
            time.sleep(0.005)

    writer = threading.Thread(target=keep_submitting)
    writer.start()
    try:
        report = run_retention(engine, settings)
    finally:
        stop.set()
        writer.join(5)

    assert report.archived_jobs == 2300
    assert count(engine, "jobs_archive") == 2300
    # Count before (+ what the writer added meanwhile) = hot + archive after.
    assert before + len(added) == count(engine, "jobs") + count(engine, "jobs_archive")
    with engine.connect() as conn:
        archived = conn.execute(
            sa.text("SELECT id, status, payload FROM jobs_archive ORDER BY id")
        ).all()
        hot_ids = set(conn.execute(sa.text("SELECT id FROM jobs")).scalars())
        events = conn.execute(sa.text("SELECT count(DISTINCT job_id) FROM job_events")).scalar()
    assert [tuple(r) for r in archived] == [tuple(r) for r in snapshot[:2300]]
    assert set(ids[2300:]) <= hot_ids and not set(ids[:2300]) & hot_ids
    assert events >= 2500  # their audit trail stays
    # A second run finds nothing more to move.
    assert run_retention(engine, settings).archived_jobs == 0


def test_an_archived_row_keeps_every_column(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    (job_id,) = submit(engine, [NewJob("fetch_page", {"url": "http://x/"}, needs_browser=True)])
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'failed', releases = 4, attempts = 2,"
                " finished_at = now() - interval '40 days' WHERE id = :id"
            ),
            {"id": job_id},
        )
        before = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()
    settings = producer_settings(database_url, tmp_path, retention_days=30)
    assert run_retention(engine, settings).archived_jobs == 1
    with engine.connect() as conn:
        after = conn.execute(
            sa.text("SELECT * FROM jobs_archive WHERE id = :id"), {"id": job_id}
        ).one()
    kept = after._asdict()
    assert kept["releases"] == 4 and kept["needs_browser"] is True
    assert {k: v for k, v in kept.items() if k != "archived_at"} == before._asdict()


def test_old_identity_leases_are_pruned_and_the_last_days_kept(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO identity_leases (job_id, profile, at)"
                " SELECT n, 'acct', now() - make_interval(days => n % 4) * 10"
                " FROM generate_series(1, 2500) AS n"
            )
        )
        kept = conn.execute(
            sa.text("SELECT count(*) FROM identity_leases WHERE at > now() - interval '30 days'")
        ).scalar_one()
    settings = producer_settings(
        database_url, tmp_path, retention_days=30, retention_batch_rows=500
    )
    run_retention(engine, settings)
    assert count(engine, "identity_leases") == kept  # 0, 10 and 20 days old; not 30
