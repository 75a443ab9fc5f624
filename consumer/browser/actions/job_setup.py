"""A job's browser, set up before its action runs: the job's options applied, its requests
logged (consumer.browser.actions.network_log), everything undone with the job's user context.

What each option is, checked here with Grid 4.48 and Debian's Chromium 156, offline:

- ``user_agent``, ``locale``, ``timezone``: ``emulation.setUserAgentOverride``,
  ``setLocaleOverride`` (navigator.language, Intl and the Accept-Language header) and
  ``setTimezoneOverride``, each for the job's user context only;
- ``headers``: ``network.setExtraHeaders`` for the user context; ``cookies``:
  ``storage.setCookie`` into the user context's partition, before the first load;
- ``window``: ``browsingContext.setViewport`` of the job's tab (CSS pixels);
- ``proxy``: ``browser.createUserContext`` takes a proxy per user context in this Chromium, so
  a proxy job gets a user context of its own (with a tab, made current) in the same warm
  browser, not a new browser (measured: a proxied job ~0.5 s, a plain one ~0.2 s, a new
  browser ~2 s). Nothing here needs a new browser, so
  no option changes the job's isolation. A persistent profile's job is the exception: its
  browser is started with the proxy (``--proxy-server``,
  consumer.browser.sessions.profile_sessions), since a user context of the proxy's would not keep
  the profile's cookies; only the credentials are answered here. An ``https://`` proxy (TLS to the
  proxy, whose certificate Chromium must trust) is a manual proxy whose address keeps its scheme;
  SOCKS5 is ``socksProxy``; a PAC script is refused per user context;
- proxy credentials: Chromium ignores them in a proxy URL and answers a 407 with its own
  prompt. A BiDi ``network.addIntercept`` on ``authRequired`` answered with
  ``network.continueWithAuth`` works, but only for a BiDi navigation: chromedriver holds BiDi
  events back while a classic command runs, so a challenge met by ``driver.get`` waits out the
  page-load timeout (seen here). So the job's tab first navigates through BiDi to a name that
  cannot resolve (PRIME_URL): the proxy challenges, we answer, and Chromium keeps the
  credentials for that proxy and sends them unasked on every later request of the context,
  classic or not, CONNECT included. CDP ``Fetch.authRequired`` would need a CDP event stream
  of our own beside chromedriver (the Grid's WebDriver endpoint gives no CDP events);
- ``block``: ``Network.setBlockedURLs`` (CDP through the Grid, on the job's tab) with the
  types' file extensions. A BiDi intercept could match the request's ``destination`` exactly,
  but it pauses every request for our answer, and the events of a classic ``get`` are held
  back (above): every page would wait out its load timeout. So a resource named without its
  usual extension (``/img?id=1``) is still loaded, and a tab the page opens is not covered.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

from scrapefleet.common.browser.options import NO_OPTIONS, BrowserOptions, CookieSpec
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.actions.network_log import recording
from scrapefleet.consumer.browser.actions.selenium_actions import ActionError
from scrapefleet.consumer.browser.sessions import bidi

log = logging.getLogger(__name__)

PRIME_URL = "http://scrapefleet-proxy-auth.invalid/"  # .invalid never resolves (RFC 2606)
_EXTENSIONS = {
    "images": ("png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp"),
    "fonts": ("woff", "woff2", "ttf", "otf", "eot"),
    "media": ("mp4", "webm", "ogg", "ogv", "mp3", "wav", "m4a", "m4v", "mov", "aac", "flac"),
}


def host_defaults(settings: Any) -> BrowserOptions:
    """The host's ``browser_*`` settings as options (a job's own win: BrowserOptions.over)."""
    proxy = settings.browser_proxy.get_secret_value() if settings.browser_proxy else None
    values = {
        "user_agent": settings.browser_user_agent,
        "proxy": proxy,
        "locale": settings.browser_locale,
        "timezone": settings.browser_timezone,
        "block": list(settings.browser_block),
    }
    return BrowserOptions.model_validate({k: v for k, v in values.items() if v})


def blocked_url_patterns(types: list[str]) -> list[str]:
    """Patterns for CDP Network.setBlockedURLs: each extension with and without a query."""
    patterns = []
    for kind in types:
        for ext in _EXTENSIONS[kind]:
            patterns += [f"*.{ext}", f"*.{ext}?*"]
    return patterns


def proxy_config(proxy: str) -> dict[str, Any]:
    """A BiDi proxy configuration for a proxy URL (its credentials are answered apart)."""
    parts = urlsplit(proxy)
    scheme = parts.scheme.lower()
    default_port = {"http": 80, "https": 443}.get(scheme, 1080)
    address = f"{parts.hostname}:{parts.port or default_port}"
    if "[" in parts.netloc:  # an IPv6 literal keeps its brackets
        address = f"[{parts.hostname}]:{parts.port or default_port}"
    if scheme.startswith("socks"):
        return {"proxyType": "manual", "socksProxy": address, "socksVersion": 5}
    if scheme == "https":
        # Chromium reads a scheme in a manual proxy's address: TLS to the proxy (its ClientHello
        # seen here). A PAC script is refused per user context ("not supported").
        address = f"https://{address}"
    return {"proxyType": "manual", "httpProxy": address, "sslProxy": address}


def proxy_server_arg(proxy: str) -> str:
    """Chromium's ``--proxy-server`` for a proxy URL, for a browser started with it (a
    persistent profile's): scheme, host and port; the credentials are answered apart."""
    parts = urlsplit(proxy)
    scheme = "socks5" if parts.scheme.lower().startswith("socks") else parts.scheme.lower()
    default_port = {"http": 80, "https": 443}.get(scheme, 1080)
    host = f"[{parts.hostname}]" if "[" in parts.netloc else parts.hostname
    return f"{scheme}://{host}:{parts.port or default_port}"


def cookie_param(cookie: CookieSpec) -> dict[str, Any]:
    assert cookie.domain is not None  # filled from the payload's url at validation
    param: dict[str, Any] = {
        "name": cookie.name,
        "value": {"type": "string", "value": cookie.value},
        "domain": cookie.domain,
        "path": cookie.path,
        "secure": cookie.secure,
        "httpOnly": cookie.http_only,
    }
    if cookie.same_site:
        param["sameSite"] = cookie.same_site
    if cookie.expiry:
        param["expiry"] = cookie.expiry
    return param


@contextlib.contextmanager
def job_browser(
    driver: Any, options: BrowserOptions = NO_OPTIONS, *, log_network: bool = True
) -> Iterator[Any]:
    """``driver`` with ``options`` applied and its requests logged, for one job.

    A session without BiDi (a test's plain driver) runs the job as it is when no option is
    asked; with options it is the host's fault (StackError). A refused option is the job's
    (ActionError, naming it)."""
    if not bidi.has_bidi(driver):
        if not options.empty:
            raise StackError("browser options need a BiDi session (options.enable_bidi = True)")
        yield driver
        return
    with contextlib.ExitStack() as undo:
        try:
            context = getattr(driver, "job_context", None)  # the session pool's, if any
            if context is not None:
                tab, user_context = context.tab, context.user_context
            else:
                tab = driver.current_window_handle
                user_context = _user_context_of(driver, tab)
            if options.proxy and options.proxy == getattr(driver, "launched_proxy", None):
                # A profile's browser, started with the proxy: its own context goes through
                # it (a proxy's user context would not keep the profile's cookies).
                _answer_proxy_credentials(driver, tab, options.proxy)
            elif options.proxy:
                tab, user_context = _proxied_context(driver, options.proxy, undo)
            _apply(driver, options, tab, user_context)
            if log_network:
                # The pool's own context outlives the job when it is cleared in place.
                standing = context is not None and user_context == context.user_context
                undo.enter_context(recording(driver, user_context, standing=standing))
        except bidi.BidiCommandError as exc:
            raise ActionError(f"browser options: {exc}") from exc
        except (ActionError, StackError):
            raise
        except Exception as exc:  # the websocket or the session: the host's fault
            raise StackError(f"browser options: {type(exc).__name__}: {exc}") from exc
        yield driver


def _user_context_of(driver: Any, tab: str) -> str:
    tree = bidi.command(driver, "browsingContext.getTree", {"root": tab, "maxDepth": 0})
    contexts = tree.get("contexts") or []
    return str(contexts[0].get("userContext", "default")) if contexts else "default"


def _proxied_context(driver: Any, proxy: str, undo: contextlib.ExitStack) -> tuple[str, str]:
    """A user context that goes through ``proxy``, with a tab made current; removed on exit."""
    made = bidi.command(driver, "browser.createUserContext", {"proxy": proxy_config(proxy)})
    user_context = str(made["userContext"])
    undo.callback(_remove_quietly, driver, user_context)
    tab = str(
        bidi.command(
            driver, "browsingContext.create", {"type": "tab", "userContext": user_context}
        )["context"]
    )
    driver.switch_to.window(tab)
    _answer_proxy_credentials(driver, tab, proxy)
    return tab, user_context


def _answer_proxy_credentials(driver: Any, tab: str, proxy: str) -> None:
    """The proxy's 407, met in ``tab`` (only when the proxy URL carries credentials)."""
    parts = urlsplit(proxy)
    if parts.username or parts.password:
        _answer_proxy_challenge(
            driver, tab, unquote(parts.username or ""), unquote(parts.password or "")
        )


def _remove_quietly(driver: Any, user_context: str) -> None:
    with contextlib.suppress(Exception):  # a dead session took it with it
        bidi.command(driver, "browser.removeUserContext", {"userContext": user_context})


def _answer_proxy_challenge(driver: Any, tab: str, username: str, password: str) -> None:
    """Meet the proxy's 407 once, in a BiDi navigation, so that Chromium keeps the
    credentials for the rest of the job (see the module's notes)."""
    challenged = threading.Event()

    def on_auth(params: dict[str, Any]) -> None:
        challenged.set()
        with contextlib.suppress(Exception):
            bidi.command(
                driver,
                "network.continueWithAuth",
                {
                    "request": params["request"]["request"],
                    "action": "provideCredentials",
                    "credentials": {"type": "password", "username": username, "password": password},
                },
            )

    event = "network.authRequired"
    listener = bidi.add_listener(driver, event, on_auth)
    intercept = subscription = None
    try:
        intercept = bidi.command(
            driver, "network.addIntercept", {"phases": ["authRequired"], "contexts": [tab]}
        )["intercept"]
        subscription = bidi.command(
            driver, "session.subscribe", {"events": [event], "contexts": [tab]}
        ).get("subscription")
        # The page is an error page (expected), or a slow proxy outlasts the websocket's
        # timeout: either way the job goes on, and a challenge met later shows in its page.
        with contextlib.suppress(Exception):
            bidi.command(
                driver,
                "browsingContext.navigate",
                {"context": tab, "url": PRIME_URL, "wait": "complete"},
            )
        if not challenged.is_set():
            log.info("proxy asked for no credentials: sending none until it does")
    finally:
        bidi.remove_listener(driver, event, listener)
        if intercept:
            with contextlib.suppress(Exception):
                bidi.command(driver, "network.removeIntercept", {"intercept": intercept})
        if subscription:
            with contextlib.suppress(Exception):
                bidi.command(driver, "session.unsubscribe", {"subscriptions": [subscription]})


def _apply(driver: Any, options: BrowserOptions, tab: str, user_context: str) -> None:
    scope = {"userContexts": [user_context]}
    if options.user_agent:
        bidi.command(
            driver, "emulation.setUserAgentOverride", {"userAgent": options.user_agent, **scope}
        )
    if options.locale:
        bidi.command(driver, "emulation.setLocaleOverride", {"locale": options.locale, **scope})
    if options.timezone:
        bidi.command(
            driver, "emulation.setTimezoneOverride", {"timezone": options.timezone, **scope}
        )
    if options.headers:
        headers = [
            {"name": name, "value": {"type": "string", "value": value}}
            for name, value in options.headers.items()
        ]
        bidi.command(driver, "network.setExtraHeaders", {"headers": headers, **scope})
    for cookie in options.cookies:
        bidi.command(
            driver,
            "storage.setCookie",
            {
                "cookie": cookie_param(cookie),
                "partition": {"type": "storageKey", "userContext": user_context},
            },
        )
    if options.window:
        viewport = {"width": options.window.width, "height": options.window.height}
        bidi.command(driver, "browsingContext.setViewport", {"context": tab, "viewport": viewport})
    if options.block:
        cdp = getattr(driver, "execute_cdp_cmd", None)
        if cdp is None:
            raise StackError("blocking resource types needs a session that speaks CDP")
        cdp("Network.enable", {})
        cdp("Network.setBlockedURLs", {"urls": blocked_url_patterns(list(options.block))})
