"""The HTTP client behind ``http_get``: one client per process, one deadline per request, and a
request of the job's own from its first hop to its last.

- **One client per process**, created on first use (under a lock: consumer threads race for
  it) and closed at exit, over common.http.pooling_transport (a connection pool per proxy).
  The client keeps no cookie between jobs: each request carries its job's cookies, and the
  cookies a redirect chain sets, in a jar of the request's own.
- **One deadline per request**: ``timeout_s`` bounds the whole fetch, DNS, connect, TLS, proxy
  handshake, every redirect and the last body byte. httpx's own timeouts apply to each socket
  operation, so a server sending a byte a second would never trip them; the deadline is set
  here for the transport, which gives every read, write and connect only what is left of it.
- **Redirects are followed by hand**, so that each hop gets what is left of the deadline, the
  cookies of the chain, and the request's egress rule (common.http.job_egress,
  ``http_allow_networks``); the job's own headers and cookies go to the job's own site only.
- What is read back is bounded by common.http.response_body; a page's text and title are
  common.http.page_text's.
"""

from __future__ import annotations

import atexit
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from urllib.parse import urlsplit

import httpx

from scrapefleet.common.actions.error_classes import HttpStatusError, Permanent, parse_retry_after
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import RETRY_AFTER_LIMIT_S
from scrapefleet.common.http.job_egress import Egress, EgressRefused, same_site
from scrapefleet.common.http.pooling_transport import (
    PROXY_EXTENSION,
    REQUEST_DEADLINE,
    REQUEST_EGRESS,
    DeadlineExceeded,
    PoolingTransport,
)
from scrapefleet.common.http.response_body import read_body
from scrapefleet.common.http.session_jar import current_session

MAX_REDIRECTS = 10


@dataclass(frozen=True)
class Fetched:
    status: int
    final_url: str
    headers: httpx.Headers
    body: bytes  # decoded (gzip/deflate), at most max_body_bytes
    truncated: bool  # the body went on past max_body_bytes
    decoded: bool  # False: a content encoding this client does not decode


class HTTPStatusFailure(HttpStatusError, RuntimeError):
    """A status >= 400 with ``fail_on_status``: raised before the body is read, classified by
    its status (common.actions.error_classes), a 429's or 503's Retry-After with it."""


class InvalidRequestUrl(Permanent, RuntimeError):
    """A URL httpx cannot request (malformed, or a scheme it does not speak): it never will."""


# -- one request ---------------------------------------------------------------------------------


def fetch(
    url: str,
    *,
    timeout_s: float,
    max_body_bytes: int,
    user_agent: str,
    egress: Egress,
    proxy: str | None = None,
    headers: Mapping[str, str] | None = None,
    cookies: Mapping[str, str] | None = None,
    fail_on_status: bool = False,
) -> Fetched:
    """GET ``url``, following redirects, all within ``timeout_s``, every hop under the
    ``egress`` rule. Raises TimeoutError when the deadline passes, HTTPStatusFailure for a
    status >= 400 if ``fail_on_status``, EgressRefused for a hop the rule refuses, and
    RuntimeError for anything else that went wrong (the httpx error chained)."""
    deadline = time.monotonic() + timeout_s
    token = REQUEST_DEADLINE.set(deadline)
    egress_token = REQUEST_EGRESS.set(egress)
    try:
        return _fetch(
            url,
            deadline=deadline,
            timeout_s=timeout_s,
            max_body_bytes=max_body_bytes,
            user_agent=user_agent,
            proxy=proxy,
            headers=headers or {},
            cookies=cookies or {},
            fail_on_status=fail_on_status,
            egress=egress,
        )
    except (httpx.TimeoutException, DeadlineExceeded) as exc:
        raise TimeoutError(f"no complete answer from {url} within {timeout_s} s") from exc
    except httpx.ProxyError as exc:
        raise RuntimeError(f"proxy failed for {url}: {exc}") from exc
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise InvalidRequestUrl(f"{type(exc).__name__} fetching {url}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise RuntimeError(f"{type(exc).__name__} fetching {url}: {exc}") from exc
    finally:
        REQUEST_EGRESS.reset(egress_token)
        REQUEST_DEADLINE.reset(token)


def _fetch(
    url: str,
    *,
    deadline: float,
    timeout_s: float,
    max_body_bytes: int,
    user_agent: str,
    proxy: str | None,
    headers: Mapping[str, str],
    cookies: Mapping[str, str],
    fail_on_status: bool,
    egress: Egress,
) -> Fetched:
    client = shared_client()
    session = current_session()
    if session is None:
        jar = job_cookie_jar(url, cookies)
    else:
        # A sticky session's jobs are one visitor: its jar (the job's own cookies added), and
        # the User-Agent its first request went out with.
        jar = job_cookie_jar(url, cookies, httpx.Cookies(session.jar))
        user_agent = session.user_agent = session.user_agent or user_agent
    request = client.build_request(
        "GET",
        url,
        headers={**headers, "User-Agent": user_agent},
        extensions={PROXY_EXTENSION: proxy},
    )
    job_url = request.url
    redirects = 0
    while True:
        _check_http(request.url)
        if (reason := egress.url_refusal(request.url)) is not None:
            raise EgressRefused(f"{reason} (fetching {_shown(request.url)})")
        _job_headers_for(request, job_url, headers)
        request.extensions = {**request.extensions, "timeout": _left_timeout(deadline)}
        jar.set_cookie_header(request)
        response = client.send(request, stream=True)
        try:
            jar.extract_cookies(response)
            next_request = response.next_request
            if next_request is None:
                if fail_on_status and response.status_code >= 400:
                    raise HTTPStatusFailure(
                        f"HTTP {response.status_code} from {url}",
                        response.status_code,
                        parse_retry_after(
                            response.headers.get("retry-after"),
                            utcnow(),
                            cap_s=RETRY_AFTER_LIMIT_S,
                        ),
                    )
                body, truncated, decoded = read_body(response, max_body_bytes, deadline)
                return Fetched(
                    status=response.status_code,
                    final_url=str(response.url),
                    headers=response.headers,
                    body=body,
                    truncated=truncated,
                    decoded=decoded,
                )
        finally:
            response.close()
        redirects += 1
        if redirects > MAX_REDIRECTS:
            raise RuntimeError(f"more than {MAX_REDIRECTS} redirects from {url}")
        request = next_request


def _shown(url: httpx.URL) -> str:
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))[:200]


def _job_headers_for(
    request: httpx.Request, job_url: httpx.URL, headers: Mapping[str, str]
) -> None:
    """The job's own headers on a hop of its own site, and none of them anywhere else (httpx
    keeps every header but Authorization across a redirect)."""
    own = same_site(job_url, request.url)
    for name, value in headers.items():
        if own:
            request.headers[name] = value
        else:
            request.headers.pop(name, None)


def _check_http(url: httpx.URL) -> None:
    if url.scheme not in ("http", "https") or not url.host:
        raise RuntimeError(f"redirected to {str(url)[:200]!r}, not an http(s) URL")


def _left_timeout(deadline: float) -> dict[str, float | None]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded
    return httpx.Timeout(left).as_dict()


def job_cookie_jar(
    url: str, cookies: Mapping[str, str], jar: httpx.Cookies | None = None
) -> httpx.Cookies:
    """The request's own jar: the job's cookies for the URL's host only (not its subdomains;
    Secure when the URL is https, so never sent in clear), and whatever the redirect chain sets
    (a cookie without a Domain attribute host-only too, as browsers keep it). Shared by no
    other request."""
    if jar is None:
        policy = DefaultCookiePolicy(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)
        jar = httpx.Cookies(CookieJar(policy=policy))
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    # The stdlib cookie jar names a dotless host "<host>.local" (its effective host name).
    domain = host if "." in host else f"{host}.local"
    for name, value in cookies.items():
        jar.jar.set_cookie(_host_only_cookie(name, value, domain, parts.scheme == "https"))
    return jar


def _host_only_cookie(name: str, value: str, domain: str, secure: bool) -> Cookie:
    return Cookie(
        version=0,
        name=name,
        value=value,
        port=None,
        port_specified=False,
        domain=domain,
        domain_specified=False,  # host-only: DomainStrictNonDomain sends it to this host alone
        domain_initial_dot=False,
        path="/",
        path_specified=True,
        secure=secure,
        expires=None,
        discard=True,
        comment=None,
        comment_url=None,
        rest={},
    )


# -- the shared client --------------------------------------------------------------------------

_client: httpx.Client | None = None
_client_lock = threading.Lock()
_atexit_registered = False


def shared_client() -> httpx.Client:
    """This process's client, created on first use."""
    global _client, _atexit_registered
    client = _client
    if client is not None:
        return client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(
                transport=PoolingTransport(ssl.create_default_context()),
                # A proxy or CA bundle from the environment would route jobs somewhere the
                # settings do not say: the proxy is the job's or http_proxy, nothing else.
                trust_env=False,
                follow_redirects=False,  # followed by hand: cookies and the deadline per hop
                max_redirects=MAX_REDIRECTS,
                cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
                headers={"Accept": "*/*", "Accept-Encoding": "gzip, deflate"},
            )
            if not _atexit_registered:
                atexit.register(close_shared_client)
                _atexit_registered = True
        return _client


def close_shared_client() -> None:
    """Close the process's client and its pools; the next request opens a new one."""
    global _client
    with _client_lock:
        client, _client = _client, None
    if client is not None:
        client.close()
