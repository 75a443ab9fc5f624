"""The dashboard's Flask application: the read-only pages, error pages, security headers.

    app = create_app(settings, engine)

Pages: ``/`` (queue, throughput, hosts, recent failures, the pause switch), ``/jobs`` (search by
id, kind, status, host), ``/jobs/<id>`` (a job, its audit trail, artifacts, webhooks),
``/schedules`` (each schedule's next and last run), ``/artifacts/<path>`` (files under
artifacts_dir), ``/login``. Controls are in ``controls``.
Every page is plain HTML: it reads and works without JavaScript.

With ``dashboard_read_needs_token`` every page but ``/login`` needs a session unlocked with the
token (or ``Authorization: Bearer <token>``). Sessions are in memory (``sessions``). Behind
``dashboard_proxies`` reverse proxies, werkzeug's ProxyFix takes scheme, host, port, prefix and
client address from their X-Forwarded-* headers; with 0 those headers are ignored, because a
client talking to the dashboard directly could otherwise claim any origin or address.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from flask import Flask, Response, redirect, render_template, request, session, url_for
from sqlalchemy.engine import Engine
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response as Redirect

from scrapefleet.common import masking
from scrapefleet.common.actions.error_classes import ERROR_CLASSES
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import DASHBOARD_PAGE_ROWS
from scrapefleet.common.db.engines import wrapped_errors
from scrapefleet.common.db.schema_base import JOB_STATUSES
from scrapefleet.common.error_lines import first_line
from scrapefleet.common.errors import DatabaseUnavailable, NotFound, SettingsError
from scrapefleet.common.ops.dashboard import charts
from scrapefleet.common.ops.dashboard import page_reads as reads
from scrapefleet.common.ops.dashboard.ages import relative_age
from scrapefleet.common.ops.dashboard.artifact_files import relative_artifact, send_artifact
from scrapefleet.common.ops.dashboard.control_forms import (
    controls,
    csrf_token,
    explicit_token,
    token_matches,
)
from scrapefleet.common.ops.dashboard.inputs import (
    BadInput,
    parse_after_id,
    parse_after_name,
    parse_job_id,
    parse_search,
)
from scrapefleet.common.ops.dashboard.job_sorts import SORTS, cursor_of
from scrapefleet.common.ops.dashboard.logins import UNLOCKED, MemorySessionInterface, SessionStore
from scrapefleet.common.ops.dashboard.security import host_allowed, local_next
from scrapefleet.common.ops.fleet_status import read_fleet_status
from scrapefleet.common.reads import queries
from scrapefleet.common.reads.kind_waits import job_wait_reason, waiting_kinds
from scrapefleet.common.reads.producer_status import delivery_state, read_producer_status
from scrapefleet.common.reads.progress import read_progress, read_rows, render_progress
from scrapefleet.common.settings import Settings

log = logging.getLogger(__name__)

# Failure groups are few by nature (7 days, grouped by cause); more than this is one page too.
FAILURE_GROUPS_SHOWN = 200

# Inline <style> only; no script at all, so script-src is 'none'.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'"
)
# Reachable without a login when dashboard_read_needs_token is set; the controls check the
# token themselves.
OPEN_ENDPOINTS = frozenset({"login", "controls.remember_token", "controls.forget_token", "healthz"})
REFRESH_CHOICES_S = (10, 30, 60)  # ?refresh=N: the page reloads itself, without JavaScript


def create_app(settings: Settings, engine: Engine, clock: Callable[[], datetime] = utcnow) -> Flask:
    if settings.dashboard_read_needs_token and settings.dashboard_token is None:
        raise SettingsError("dashboard_read_needs_token is set but dashboard_token is not")
    app = Flask(__name__)
    app.session_interface = MemorySessionInterface(SessionStore(settings.dashboard_session_idle_s))
    if settings.dashboard_proxies:
        n = settings.dashboard_proxies
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=n, x_proto=n, x_host=n, x_port=n, x_prefix=n
        )
    app.config["SCRAPEFLEET_SETTINGS"] = settings
    app.config["SCRAPEFLEET_ENGINE"] = engine
    app.register_blueprint(controls)
    # A bulk control's hidden fields: each listed job id becomes an ("ids", id) pair.
    app.add_template_filter(lambda job_id: ("ids", job_id), "tuple_ids")
    # An error's text may name a proxy URL with its password: shown through this, always.
    app.add_template_filter(lambda text: masking.mask_text(text or ""), "masked")
    app.add_template_global(csrf_token, "csrf_token")
    app.add_template_global(lambda value: relative_age(value, clock()), "ago")
    # The page's own address for a form's "next": the prefix a proxy mounts us under included.
    app.add_template_global(lambda: request.script_root + request.full_path, "here")

    @app.context_processor
    def common_context() -> dict[str, Any]:
        return {
            "controls_enabled": settings.dashboard_token is not None,
            "token_remembered": bool(session.get(UNLOCKED)),
            "statuses": JOB_STATUSES,
            "error_classes": ERROR_CLASSES,
            "artifact_link": lambda stored: relative_artifact(settings.artifacts_dir, stored),
        }

    _install_checks(app, settings)
    _install_pages(app, settings, engine, clock)
    _install_job_pages(app, engine)
    _install_object_pages(app, settings, engine)
    _install_errors(app)
    return app


def _reader(engine: Engine) -> Callable[..., Any]:
    def read(func: Any, *args: Any) -> Any:
        with wrapped_errors(), engine.connect() as conn:
            return func(conn, *args)

    return read


def _message(text: str, status: int) -> tuple[str, int]:
    return render_template("message.html", message=text, status=status), status


def _install_checks(app: Flask, settings: Settings) -> None:
    """Before every request: the Host header, and the login when reading needs the token."""
    allowed_hosts = frozenset(settings.dashboard_hosts)

    @app.before_request
    def refuse_unknown_host() -> Response | None:
        if host_allowed(request.host, allowed_hosts):
            return None
        return Response(
            f"host name {request.host[:100]!r} is not one this dashboard answers to:"
            " add it to dashboard_hosts\n",
            400,
            mimetype="text/plain",
        )

    @app.before_request
    def require_login() -> Redirect | None:
        if not settings.dashboard_read_needs_token or request.endpoint in OPEN_ENDPOINTS:
            return None
        if session.get(UNLOCKED):
            return None
        supplied = explicit_token()
        if supplied is not None and token_matches(supplied):
            return None
        target = request.script_root + request.full_path
        return redirect(url_for("login", next=target.removesuffix("?")), code=303)


def _install_pages(
    app: Flask, settings: Settings, engine: Engine, clock: Callable[[], datetime]
) -> None:
    """The login, the overview, and the two answers for programs (status, health)."""

    @app.get("/login")
    def login() -> Redirect | tuple[str, int]:
        target = local_next(request.args.get("next"), url_for("overview"))
        if session.get(UNLOCKED) or settings.dashboard_token is None:
            return redirect(target, code=303)
        return render_template("login.html", next=target), 200

    @app.get("/")
    def overview() -> str:
        now = clock()
        with wrapped_errors(), engine.connect() as conn:
            counts = queries.status_counts(conn)
            control = queries.fleet_control(conn)
            producer = read_producer_status(conn)
            hosts = reads.hosts_overview(conn)
            failures = reads.recent_failures(conn, DASHBOARD_PAGE_ROWS)
            progress = read_progress(conn)
            waiting = waiting_kinds(conn)
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
            producer=producer,
            hosts=hosts,
            failures=failures,
            throughput=throughput,
            progress_line=render_progress(progress, producer.up).removeprefix("progress: "),
            waiting_kinds=waiting,
            refresh=refresh_s(),
            refresh_choices=REFRESH_CHOICES_S,
            now=now,
        )

    def refresh_s() -> int | None:
        asked = request.args.get("refresh", "")
        return int(asked) if asked.isdigit() and int(asked) in REFRESH_CHOICES_S else None

    @app.get("/api/status")
    def api_status() -> Response:
        """What `scrapefleet status --json` prints, for scripts and monitors."""
        with wrapped_errors(), engine.connect() as conn:
            document = read_fleet_status(conn).json()
        return Response(document, mimetype="application/json")

    @app.get("/healthz")
    def healthz() -> Response:
        """200 when the dashboard can read the database, 503 when not: for a load balancer.
        Says nothing else, so it needs no login."""
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            log.warning("healthz: database unreachable: %s", first_line(exc))
            return Response("database unreachable\n", 503, mimetype="text/plain")
        return Response("ok\n", 200, mimetype="text/plain")


def _install_job_pages(app: Flask, engine: Engine) -> None:
    """The job search, a job's page and a host's page."""
    read = _reader(engine)

    @app.get("/jobs")
    def search() -> tuple[str, int]:
        try:
            criteria = parse_search(request.args)
        except BadInput as exc:
            return render_template("search.html", error=str(exc), rows=[], args=request.args), 400
        rows = read(reads.search_jobs, criteria, DASHBOARD_PAGE_ROWS)
        total = read(reads.count_jobs, criteria)
        sort = SORTS[criteria.sort]
        # The next page starts after this one's last row; only when this page is full.
        more = cursor_of(sort, rows[-1]) if len(rows) == DASHBOARD_PAGE_ROWS else None
        return render_template(
            "search.html",
            rows=rows,
            criteria=criteria,
            args=request.args,
            error=None,
            total=f"{reads.COUNT_CAP:,}+" if total > reads.COUNT_CAP else f"{total:,}",
            sort=sort,
            sorts=SORTS.values(),
            more=more,
            page_args={k: v for k, v in request.args.items() if k != "after"},
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
                return _message(f"no job with id {job_id}", 404)
            archived = True
        job = masking.mask_job_row(job)  # a proxy password or a cookie is never shown back
        events = [masking.mask_job_row(e) for e in read(queries.job_events, job_id)]
        webhooks = [masking.mask_job_row(w) for w in read(reads.webhook_deliveries, job_id)]
        waiting = None if archived else read(job_wait_reason, job)
        # Only the producer knows whether it has a secret to sign with: its row says.
        secret_set = read(read_producer_status).webhook_secret_set if webhooks else None
        return render_template(
            "job.html",
            job=job,
            events=events,
            webhooks=webhooks,
            archived=archived,
            waiting=waiting,
            blocked=lambda delivery: delivery_state(delivery, secret_set),
        ), 200

    @app.get("/hosts/<name>")
    def host_page(name: str) -> tuple[str, int]:
        page = read(reads.host_page, name, DASHBOARD_PAGE_ROWS)
        if page is None:
            return _message(f"no host named {name!r}", 404)
        return render_template(
            "host.html",
            h=page["host"],
            o=page["outcomes"],
            events=page["events"],
            failures=page["failures"],
        ), 200


def _install_object_pages(app: Flask, settings: Settings, engine: Engine) -> None:
    """A page for every kind of object, linked from the header."""
    read = _reader(engine)

    def object_list(
        title: str,
        rows: list[dict[str, Any]],
        key: str,
        columns: list[str],
        link: str | None,
        scope: str | None = None,
    ) -> tuple[str, int]:
        """One object list: ``columns`` of ``rows``; the next page starts after the last
        row's ``key`` when this page is full; ``link``: the job search field a row's key
        fills, to list its jobs (None: no link); ``scope``: each row gets a live pause or
        resume control of that scope (common.store.operating.controls)."""
        more = rows[-1][key] if len(rows) == DASHBOARD_PAGE_ROWS else None
        return render_template(
            "objects.html",
            title=title,
            rows=rows,
            key=key,
            columns=columns,
            link=link,
            more=more,
            scope=scope,
        ), 200

    @app.get("/crawls")
    def crawls() -> tuple[str, int]:
        rows = read(
            reads.crawl_list, parse_after_id(request.args.get("after")), DASHBOARD_PAGE_ROWS
        )
        columns = ["crawl_id", "seed", "jobs", "done", "pending", "failed", "cancelled",
                   "depth_reached", "max_depth", "max_jobs", "created_at",
                   "last_finished_at"]  # fmt: skip
        return object_list("Crawls", rows, "crawl_id", columns, "crawl", "crawl")

    @app.get("/rate-limits")
    def rate_limits() -> tuple[str, int]:
        rows = read(
            reads.rate_key_list, parse_after_name(request.args.get("after")), DASHBOARD_PAGE_ROWS
        )
        columns = ["key", "in_flight", "started_last_minute", "pending", "concurrency_limit",
                   "per_minute_limit", "factor", "paused_until"]  # fmt: skip
        return object_list("Rate keys", rows, "key", columns, None, "rate_key")

    @app.get("/profiles")
    def profiles() -> tuple[str, int]:
        rows = read(
            reads.profile_list, parse_after_name(request.args.get("after")), DASHBOARD_PAGE_ROWS
        )
        columns = ["name", "host", "state", "cooldown_until", "last_used_at", "jobs", "blocks",
                   "created_at"]  # fmt: skip
        return object_list("Browser profiles", rows, "name", columns, None)

    @app.get("/identities")
    def identities() -> tuple[str, int]:
        rows = read(
            reads.identity_list, parse_after_name(request.args.get("after")), DASHBOARD_PAGE_ROWS
        )
        columns = ["identity", "kind", "pool", "state", "jobs", "blocks", "errors",
                   "jobs_last_hour", "ban_rate_hour", "jobs_last_day", "ban_rate_day",
                   "cooldown_until", "banned_until"]  # fmt: skip
        return object_list("Proxies and profiles", rows, "identity", columns, None)

    @app.get("/failures")
    def failures() -> tuple[str, int]:
        rows = read(read_rows, "failure_groups", FAILURE_GROUPS_SHOWN)
        return render_template("failures.html", groups=rows), 200

    @app.get("/schedules")
    def schedules() -> tuple[str, int]:
        rows = read(reads.schedules, DASHBOARD_PAGE_ROWS)
        return render_template("schedules.html", rows=rows), 200

    @app.get("/artifacts/<path:relative>")
    def artifact(relative: str) -> Response:
        return send_artifact(settings.artifacts_dir, relative)


def _install_errors(app: Flask) -> None:
    """Errors: a message page, never a bare traceback; and every answer's security headers."""
    message = _message

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
        # Pages carry the session's form token: no shared cache may keep them.
        response.headers.setdefault("Cache-Control", "no-store")
        return response
