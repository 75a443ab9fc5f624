"""The dashboard's controls: POST forms, each checked before anything changes.

Every control passes three checks (``guard``):

1. Where it comes from: ``Sec-Fetch-Site``/``Origin`` must say the dashboard's own origin
   (``security.origin_verdict``). A page on another port of the same host is refused: cookies,
   SameSite=Strict included, do not separate ports, so this check is what does.
2. The form token: a browser's form must carry its session's ``csrf_token``, which only the
   dashboard's own pages show (before a login it is kept in a signed cookie, not on the
   server: ``logins``).
3. The operator: ``dashboard_token``, typed into the form (``token``) or remembered by the
   session after the "unlock" form; ``Authorization: Bearer <token>`` for scripts.

A request with neither Origin nor Sec-Fetch-Site is not from a browser (every current browser
sends Origin on a POST): a forged cross-site form cannot produce one. It is accepted only when
it carries the token itself; a session cookie alone, the one credential a browser adds without
being asked, counts for nothing there. No token configured: every control is a 403 and the
pages hide the forms (read-only). Changes go through scrapefleet.common.store, like the CLI's;
after a control the browser is redirected back (POST, redirect, GET), with a one-line notice.
"""

from __future__ import annotations

import hmac
import logging
import secrets

from flask import (
    Blueprint,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from werkzeug.exceptions import Forbidden
from werkzeug.wrappers import Response

from scrapefleet.common import store
from scrapefleet.common.constants import BULK_CONFIRM_OVER_JOBS
from scrapefleet.common.db.engines import transaction, wrapped_errors
from scrapefleet.common.errors import HostBusy, HostOffline, NotFound, SubmitError
from scrapefleet.common.ops import bulk
from scrapefleet.common.ops.dashboard.inputs import BadInput, parse_job_ids
from scrapefleet.common.ops.dashboard.logins import UNLOCKED, DashboardSession
from scrapefleet.common.ops.dashboard.security import Verdict, local_next, origin_verdict
from scrapefleet.common.reads import queries
from scrapefleet.common.runtime.logging_setup import fields
from scrapefleet.common.settings import Settings
from scrapefleet.common.store import JobFilter
from scrapefleet.common.store.operating.controls import NAME_MAX_CHARS as CONTROL_NAME_MAX_CHARS

log = logging.getLogger(__name__)

MAX_REASON = 500
CSRF_FIELD = "csrf_token"

controls = Blueprint("controls", __name__)


def _settings() -> Settings:
    return current_app.config["SCRAPEFLEET_SETTINGS"]


def token_matches(supplied: str) -> bool:
    configured = _settings().dashboard_token
    if configured is None:
        return False
    return hmac.compare_digest(supplied.encode(), configured.get_secret_value().encode())


def explicit_token() -> str | None:
    """The token this request carries itself (form field or bearer header), if any."""
    if request.method == "POST" and request.form.get("token"):
        return request.form["token"]
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def csrf_token() -> str:
    """This session's form token (made on first use); every POST form carries it."""
    if CSRF_FIELD not in session:
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
    token: str = session[CSRF_FIELD]
    return token


def guard(need_token: bool = True) -> None:
    """Refuse (403) a state-changing request that fails any of the three checks above."""
    if need_token and _settings().dashboard_token is None:
        raise Forbidden("read-only dashboard: no dashboard_token is configured")
    origin = request.headers.get("Origin")
    fetch_site = request.headers.get("Sec-Fetch-Site")
    verdict = origin_verdict(origin, fetch_site, request.host_url)
    if verdict is Verdict.CROSS:
        log.warning(
            "refused a cross-origin %s %s (Origin %r, Sec-Fetch-Site %r, own %s)",
            request.method,
            request.path,
            origin,
            fetch_site,
            request.host_url,
        )
        raise Forbidden("refused: this form was not sent from the dashboard's own pages")
    supplied = explicit_token()
    if supplied is not None and not token_matches(supplied):
        raise Forbidden("invalid or missing dashboard token")
    if verdict is Verdict.NO_BROWSER:
        if need_token and supplied is None:
            raise Forbidden(
                "a request without Origin or Sec-Fetch-Site must carry the dashboard token"
                " itself (form field token, or Authorization: Bearer)"
            )
        return
    expected = session.get(CSRF_FIELD)
    sent = request.form.get(CSRF_FIELD, "")
    if not expected or not hmac.compare_digest(sent.encode(), str(expected).encode()):
        raise Forbidden(
            "this form's session has ended (idle too long, locked, or the dashboard restarted):"
            " reload the page and try again"
        )
    if need_token and supplied is None and not session.get(UNLOCKED):
        raise Forbidden("invalid or missing dashboard token")


def _who() -> str:
    return f"dashboard ({request.remote_addr})"


def _back(default: str) -> Response:
    # Only a path on this site: an open redirect would turn the dashboard into a phishing aid.
    return redirect(local_next(request.form.get("next"), default), code=303)


def _start_over() -> None:
    assert isinstance(session, DashboardSession)
    session.start_over()


@controls.post("/control/token")
def remember_token() -> Response:
    guard()
    # A new session id: an id planted beforehand (any port of this host can set our cookie)
    # must never become the unlocked one.
    _start_over()
    session[UNLOCKED] = True
    flash("controls unlocked in this browser")
    return _back(url_for("overview"))


@controls.post("/control/token/forget")
def forget_token() -> Response:
    guard(need_token=False)
    _start_over()
    flash("token forgotten")
    return _back(url_for("overview"))


@controls.post("/control/assignment")
def assignment() -> Response:
    guard()
    action = request.form.get("action")
    if action not in ("pause", "resume"):
        raise BadInput("action must be pause or resume")
    reason = (request.form.get("reason") or "").strip()[:MAX_REASON] or None
    with transaction(current_app.config["SCRAPEFLEET_ENGINE"]) as conn:
        changed = store.set_assignment_paused(conn, action == "pause", _who(), reason)
    if not changed:
        flash(
            f"assignment was already {'paused' if action == 'pause' else 'going'}: nothing changed"
        )
        return _back(url_for("overview"))
    log.warning("assignment %s from the dashboard", f"{action}d", extra=fields(action=action))
    flash(f"assignment {action}d for the whole fleet")
    return _back(url_for("overview"))


@controls.post("/control/live")
def live() -> Response:
    """Pause or resume one rate key or crawl live (`scrapefleet controls`)."""
    guard()
    action = request.form.get("action")
    if action not in ("pause", "resume"):
        raise BadInput("action must be pause or resume")
    scope = request.form.get("scope")
    if scope not in ("rate_key", "kind", "crawl"):
        raise BadInput("scope must be rate_key, kind or crawl")
    name = (request.form.get("name") or "").strip()
    if not 1 <= len(name) <= CONTROL_NAME_MAX_CHARS or not name.isprintable():
        raise BadInput(f"name must have 1 to {CONTROL_NAME_MAX_CHARS} printable characters")
    reason = (request.form.get("reason") or "").strip()[:MAX_REASON] or None
    with transaction(current_app.config["SCRAPEFLEET_ENGINE"]) as conn:
        changed = store.change_control(
            conn, store.Scope(scope), name, store.ControlChange(action), _who(), reason
        )
    what = f"{scope.replace('_', ' ')} {name}"
    if not changed:
        flash(f"{what} was already {'paused' if action == 'pause' else 'going'}: nothing changed")
    else:
        log.warning("%s %sd from the dashboard", what, action, extra=fields(action=action))
        flash(f"{what} {action}d from the producer's next cycle")
    return _back(url_for("overview"))


@controls.post("/control/hosts/<name>")
def host(name: str) -> Response:
    guard()
    action = request.form.get("action")
    engine = current_app.config["SCRAPEFLEET_ENGINE"]
    try:
        with transaction(engine) as conn:
            if action == "drain":
                handed = store.drain_host(conn, name, f"drained from the {_who()}")
                notice = f"host {name} draining; {len(handed)} queued job(s) handed back"
            elif action == "enable":
                enabled = store.enable_host(conn, name)
                notice = f"host {name} active" if enabled else f"host {name} is active already"
            else:
                raise BadInput("action must be drain or enable")
    except (NotFound, HostBusy, HostOffline) as exc:  # busy: its consumer holds the row
        raise BadInput(str(exc)) from None
    log.info("host %s from the dashboard", action, extra=fields(host=name, action=action))
    flash(notice)
    return _back(url_for("overview"))


@controls.post("/control/jobs")
def jobs() -> Response | tuple[str, int]:
    """retry (failed -> pending; cancelled too with ``include_cancelled``) or cancel
    (pending/queued -> cancelled) the jobs named by the form's ``ids`` fields (one job's page,
    or the rows a search listed). Over BULK_CONFIRM_OVER_JOBS jobs it shows the count and asks
    first: the same form again with ``confirm`` set to the count accepted."""
    guard()
    action = request.form.get("action")
    if action not in (bulk.RETRY, bulk.CANCEL):
        raise BadInput("action must be retry or cancel")
    ids = list(dict.fromkeys(parse_job_ids(request.form.getlist("ids"))))
    include_cancelled = action == bulk.RETRY and request.form.get("include_cancelled") == "1"
    which = JobFilter(ids=ids)
    statuses = bulk.movable(action, include_cancelled)
    engine = current_app.config["SCRAPEFLEET_ENGINE"]
    default = url_for("job_page", job_ref=ids[0]) if len(ids) == 1 else url_for("search")
    with wrapped_errors(), engine.connect() as conn:
        count = bulk.would_move(queries.jobs_matching_by_status(conn, which), statuses)
    if count > BULK_CONFIRM_OVER_JOBS and not _confirmed(count):
        page = render_template(
            "confirm.html",
            action=action,
            count=count,
            ids=ids,
            statuses=statuses,
            include_cancelled=include_cancelled,
            next=local_next(request.form.get("next"), default),
        )
        return page, 200
    try:
        with transaction(engine) as conn:
            if action == bulk.RETRY:
                moved = store.retry_jobs(conn, which, include_cancelled=include_cancelled)
            else:
                moved = store.cancel_jobs(conn, which)
            moved_set = set(moved)
            unmoved = [i for i in ids if i not in moved_set]
            found = queries.job_statuses(conn, unmoved) if unmoved else {}
    except SubmitError as exc:
        raise BadInput(str(exc)) from None
    # The ids, so that the journal says which jobs an operator moved (the first 100 of a bulk).
    shown = ", ".join(map(str, moved[:100])) + (" ..." if len(moved) > 100 else "")
    log.info(
        "%s %d job(s) from the dashboard: %s",
        action,
        len(moved),
        shown,
        extra=fields(action=action),
    )
    why = bulk.unmoved_ids(
        action,
        ids,
        moved,
        found,
        include_cancelled=include_cancelled,
        include_flag="a cancelled job's own page",
    )
    flash(f"{action}: {len(moved):,} of {len(ids):,} job(s) moved" + (f"; {why}" if why else ""))
    return _back(default)


def _confirmed(count: int) -> bool:
    """The confirm step's answer covers ``count`` jobs (more than it showed: ask again)."""
    answer = request.form.get("confirm", "")
    return answer.isdigit() and answer.isascii() and count <= int(answer)
