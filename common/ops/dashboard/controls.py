"""The dashboard's controls: POST forms, each checked against ``dashboard_token``.

No token configured: every control is a 403 and the pages hide the forms (read-only). A token
is accepted from the form (``token`` field) or from an HttpOnly, SameSite=Strict cookie set by
the "unlock" form, so another site can never post with it. Wrong or missing token: 403.
Changes go through scrapefleet.common.store, like the CLI's; after a control the browser is
redirected back (POST, redirect, GET), with a one-line notice.
"""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, current_app, flash, redirect, request, url_for
from werkzeug.exceptions import Forbidden
from werkzeug.wrappers import Response

from scrapefleet.common import store
from scrapefleet.common.db import transaction
from scrapefleet.common.errors import NotFound, SubmitError
from scrapefleet.common.logging_setup import fields
from scrapefleet.common.ops.dashboard.inputs import BadInput, parse_job_ids
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import JobFilter

log = logging.getLogger(__name__)

TOKEN_COOKIE = "scrapefleet_token"
MAX_REASON = 500

controls = Blueprint("controls", __name__)


def _settings() -> Settings:
    return current_app.config["SCRAPEFLEET_SETTINGS"]


def _require_token() -> None:
    configured = _settings().dashboard_token
    if configured is None:
        raise Forbidden("read-only dashboard: no dashboard_token is configured")
    supplied = request.form.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
    if not hmac.compare_digest(supplied.encode(), configured.get_secret_value().encode()):
        raise Forbidden("invalid or missing dashboard token")


def _who() -> str:
    return f"dashboard ({request.remote_addr})"


def _back(default: str) -> Response:
    # Only a path on this site: an open redirect would turn the dashboard into a phishing aid.
    target = request.form.get("next", "")
    if not target.startswith("/") or target.startswith("//"):
        target = default
    return redirect(target, code=303)


@controls.post("/control/token")
def remember_token() -> Response:
    _require_token()
    response = _back(url_for("overview"))
    response.set_cookie(
        TOKEN_COOKIE,
        request.form["token"],
        httponly=True,
        samesite="Strict",
        secure=request.is_secure,
    )
    flash("controls unlocked in this browser")
    return response


@controls.post("/control/token/forget")
def forget_token() -> Response:
    response = _back(url_for("overview"))
    response.delete_cookie(TOKEN_COOKIE)
    flash("token forgotten")
    return response


@controls.post("/control/assignment")
def assignment() -> Response:
    _require_token()
    action = request.form.get("action")
    if action not in ("pause", "resume"):
        raise BadInput("action must be pause or resume")
    reason = (request.form.get("reason") or "").strip()[:MAX_REASON] or None
    with transaction(current_app.config["SCRAPEFLEET_ENGINE"]) as conn:
        store.set_assignment_paused(conn, action == "pause", _who(), reason)
    log.warning("assignment %s from the dashboard", f"{action}d", extra=fields(action=action))
    flash(f"assignment {action}d for the whole fleet")
    return _back(url_for("overview"))


@controls.post("/control/hosts/<name>")
def host(name: str) -> Response:
    _require_token()
    action = request.form.get("action")
    engine = current_app.config["SCRAPEFLEET_ENGINE"]
    try:
        with transaction(engine) as conn:
            if action == "drain":
                handed = store.drain_host(conn, name, f"drained from the {_who()}")
                notice = f"host {name} draining; {len(handed)} queued job(s) handed back"
            elif action == "enable":
                store.enable_host(conn, name)
                notice = f"host {name} active"
            else:
                raise BadInput("action must be drain or enable")
    except NotFound as exc:
        raise BadInput(str(exc)) from None
    log.info("host %s from the dashboard", action, extra=fields(host=name, action=action))
    flash(notice)
    return _back(url_for("overview"))


@controls.post("/control/jobs")
def jobs() -> Response:
    """retry (failed/cancelled -> pending) or cancel (pending/queued -> cancelled) the jobs
    named by the form's ``ids`` fields (one job's page, or the rows a search listed)."""
    _require_token()
    action = request.form.get("action")
    ids = parse_job_ids(request.form.getlist("ids"))
    engine = current_app.config["SCRAPEFLEET_ENGINE"]
    try:
        with transaction(engine) as conn:
            if action == "retry":
                moved = store.retry_jobs(conn, JobFilter(ids=ids))
            elif action == "cancel":
                moved = store.cancel_jobs(conn, JobFilter(ids=ids))
            else:
                raise BadInput("action must be retry or cancel")
    except SubmitError as exc:
        raise BadInput(str(exc)) from None
    log.info("%s %d job(s) from the dashboard", action, len(moved), extra=fields(action=action))
    flash(f"{action}: {len(moved)} of {len(ids)} job(s) moved")
    default = url_for("job_page", job_ref=ids[0]) if len(ids) == 1 else url_for("search")
    return _back(default)
