"""The dashboard's Flask application: the read-only pages, error pages, security headers.

    app = create_app(settings, engine)

Pages: ``/`` (queue, throughput, hosts, recent failures, the pause switch), ``/jobs`` (search by
id, kind, status, host), ``/jobs/<id>`` (a job, its audit trail, artifacts, webhooks),
``/artifacts/<path>`` (files under artifacts_dir). Controls are in ``controls``. Every page is
plain HTML: it reads and works without JavaScript.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from flask import Flask, Response, render_template, request
from sqlalchemy.engine import Engine
from werkzeug.exceptions import HTTPException

from scrapefleet.common import queries
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import DASHBOARD_PAGE_ROWS
from scrapefleet.common.db import wrapped_errors
from scrapefleet.common.errors import DatabaseUnavailable, NotFound
from scrapefleet.common.ops.dashboard import charts, reads
from scrapefleet.common.ops.dashboard.artifacts import relative_artifact, send_artifact
from scrapefleet.common.ops.dashboard.controls import TOKEN_COOKIE, controls
from scrapefleet.common.ops.dashboard.inputs import BadInput, parse_job_id, parse_search
from scrapefleet.common.settings import Settings
from scrapefleet.common.tables import JOB_STATUSES

log = logging.getLogger(__name__)

# Inline <style> only; no script at all, so script-src is 'none'.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'"
)


def create_app(settings: Settings, engine: Engine) -> Flask:
    app = Flask(__name__)
    # Only for flash messages after a control; nothing secret is kept in the session.
    app.secret_key = secrets.token_bytes(32)
    app.config["SCRAPEFLEET_SETTINGS"] = settings
    app.config["SCRAPEFLEET_ENGINE"] = engine
    app.register_blueprint(controls)
    # A bulk control's hidden fields: each listed job id becomes an ("ids", id) pair.
    app.add_template_filter(lambda job_id: ("ids", job_id), "tuple_ids")

    def read(func: Any, *args: Any) -> Any:
        with wrapped_errors(), engine.connect() as conn:
            return func(conn, *args)

    @app.context_processor
    def common_context() -> dict[str, Any]:
        return {
            "controls_enabled": settings.dashboard_token is not None,
            "token_remembered": bool(request.cookies.get(TOKEN_COOKIE)),
            "statuses": JOB_STATUSES,
            "artifact_link": lambda stored: relative_artifact(settings.artifacts_dir, stored),
        }

    @app.get("/")
    def overview() -> str:
        now = utcnow()
        with wrapped_errors(), engine.connect() as conn:
            counts = queries.status_counts(conn)
            control = queries.fleet_control(conn)
            hosts = reads.hosts_overview(conn)
            failures = reads.recent_failures(conn, DASHBOARD_PAGE_ROWS)
            throughput = []
            for window in charts.WINDOWS:
                since = charts.bucket_starts(window, now)[0]
                finished = reads.finished_counts(
                    conn, now.fromtimestamp(since, now.tzinfo), window.step_s
                )
                bars = charts.fill_bars(window, now, finished)
                totals = (sum(b.completed for b in bars), sum(b.failed for b in bars))
                throughput.append((window, charts.bar_chart(window, bars), totals))
        return render_template(
            "overview.html",
            counts=counts,
            fleet=control,
            hosts=hosts,
            failures=failures,
            throughput=throughput,
            now=now,
        )

    @app.get("/jobs")
    def search() -> tuple[str, int]:
        try:
            criteria = parse_search(request.args)
        except BadInput as exc:
            return render_template("search.html", error=str(exc), rows=[], args=request.args), 400
        rows = read(reads.search_jobs, criteria, DASHBOARD_PAGE_ROWS)
        return render_template(
            "search.html", rows=rows, criteria=criteria, args=request.args, error=None
        ), 200

    @app.get("/jobs/<job_ref>")
    def job_page(job_ref: str) -> tuple[str, int]:
        job_id = parse_job_id(job_ref)
        archived = False
        try:
            job = read(queries.job, job_id)
        except NotFound:
            job = read(reads.archived_job, job_id)
            if job is None:
                return message(f"no job with id {job_id}", 404)
            archived = True
        events = read(queries.job_events, job_id)
        webhooks = read(reads.webhook_deliveries, job_id)
        return render_template(
            "job.html", job=job, events=events, webhooks=webhooks, archived=archived
        ), 200

    @app.get("/artifacts/<path:relative>")
    def artifact(relative: str) -> Response:
        return send_artifact(settings.artifacts_dir, relative)

    # -- errors: a message page, never a bare traceback ----------------------------------------

    def message(text: str, status: int) -> tuple[str, int]:
        return render_template("message.html", message=text, status=status), status

    @app.errorhandler(BadInput)
    def bad_input(exc: BadInput) -> tuple[str, int]:
        return message(str(exc), 400)

    @app.errorhandler(DatabaseUnavailable)
    def database_down(exc: DatabaseUnavailable) -> tuple[str, int]:
        return message(str(exc), 503)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[str, int]:
        return message(exc.description or exc.name, exc.code or 500)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> tuple[str, int]:
        log.exception("dashboard request failed: %s %s", request.method, request.path)
        return message("internal error; the dashboard's log has the details", 500)

    @app.after_request
    def security_headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    return app
