"""The HTTP client behind ``http_get``: one connection pool per process, one deadline per
request, a bounded body, and the page's title as a browser would show it.

- **One client per process**, created on first use (under a lock: consumer threads race for
  it) and closed at exit. Its transport keeps a connection pool per proxy (direct is one more),
  the least recently used dropped past ``MAX_POOLS`` and closed once its last response is.
  The client keeps no cookie between jobs: each request carries its job's cookies, and the
  cookies a redirect chain sets, in a jar of the request's own.
- **One deadline per request**: ``timeout_s`` bounds the whole fetch, DNS, connect, TLS, proxy
  handshake, every redirect and the last body byte. httpx's own timeouts apply to each socket
  operation, so a server sending a byte a second would never trip them; here every read,
  write and connect is given only what is left of the request's deadline (a context variable:
  the pooled connections outlive any one request). Host names are resolved in a helper thread
  so that a hung resolver counts too.
- **A bounded body**: at most ``max_body_bytes`` after decompression (gzip and deflate are
  decoded here with a bounded output, so a small compressed body cannot expand past the cap).
- **Egress**: every hop's addresses are checked by the request's rule (common.http.egress,
  ``http_allow_networks``) where they are resolved, and the connection goes to those addresses;
  the job's own headers and cookies go to the job's own site only.
- **Titles** are read with ``html.parser``: entities decoded, whitespace collapsed, as the
  page's ``document.title``, and bounded.
"""

from __future__ import annotations

import atexit
import codecs
import contextvars
import functools
import re
import ssl
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from urllib.parse import unquote, urlsplit, urlunsplit

import httpcore
import httpx
from w3lib.encoding import html_to_unicode

from scrapefleet.common.actions.error_classes import HttpStatusError, Permanent, parse_retry_after
from scrapefleet.common.clock import utcnow
from scrapefleet.common.constants import RETRY_AFTER_LIMIT_S
from scrapefleet.common.http.deadline_transport import (
    DeadlineBackend,
    httpx_errors,
    resolve_within,
    system_addresses,
)
from scrapefleet.common.http.job_egress import Egress, EgressRefused, same_site

MAX_REDIRECTS = 10
MAX_POOLS = 32  # distinct proxies (and direct) with a pool of their own
KEEPALIVE_CONNECTIONS = 32  # idle connections kept per pool
KEEPALIVE_EXPIRY_S = 30.0
READ_CHUNK = 64 * 1024

RESULT_MAX_HEADERS = 50  # response headers kept in the result, the first ones
RESULT_HEADER_CHARS = 1024  # each value cut to this
TITLE_MAX_CHARS = 1024
TITLE_SCAN_BYTES = 1024 * 1024  # the title is looked for in this much of the body

PROXY_EXTENSION = "scrapefleet.proxy"  # the request's proxy URL, read by the transport

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "scrapefleet_http_deadline", default=None
)
# The request's address rule, read where its connections resolve their addresses.
_EGRESS: contextvars.ContextVar[Egress | None] = contextvars.ContextVar(
    "scrapefleet_http_egress", default=None
)


class DeadlineExceeded(TimeoutError):
    """The request's whole deadline passed (raised as the httpx timeout of the operation)."""


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
    token = _DEADLINE.set(deadline)
    egress_token = _EGRESS.set(egress)
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
        _EGRESS.reset(egress_token)
        _DEADLINE.reset(token)


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
    jar = job_cookie_jar(url, cookies)
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
                body, truncated, decoded = _read_body(response, max_body_bytes, deadline)
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


def job_cookie_jar(url: str, cookies: Mapping[str, str]) -> httpx.Cookies:
    """The request's own jar: the job's cookies for the URL's host only (not its subdomains;
    Secure when the URL is https, so never sent in clear), and whatever the redirect chain sets
    (a cookie without a Domain attribute host-only too, as browsers keep it). Shared by no
    other request."""
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


# -- the body -----------------------------------------------------------------------------------


class _BoundedDecoder:
    """gzip or deflate decoding whose output never exceeds what the caller asks for."""

    def __init__(self, encoding: str) -> None:
        self._deflate = encoding == "deflate"
        # deflate is meant to be zlib-wrapped, yet some servers send it raw.
        self._z = zlib.decompressobj(zlib.MAX_WBITS if self._deflate else 16 + zlib.MAX_WBITS)
        self._first = True

    def feed(self, data: bytes, max_out: int) -> tuple[bytes, bool]:
        """Up to ``max_out`` bytes of output, and whether more output is pending."""
        try:
            out = self._z.decompress(data, max_out)
        except zlib.error:
            if not (self._deflate and self._first):
                raise
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._z.decompress(data, max_out)
        self._first = False
        return out, bool(self._z.unconsumed_tail)


def _read_body(
    response: httpx.Response, max_bytes: int, deadline: float
) -> tuple[bytes, bool, bool]:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    decoder = _BoundedDecoder(encoding) if encoding in ("gzip", "x-gzip", "deflate") else None
    decoded = decoder is not None or encoding in ("", "identity")
    body = bytearray()
    for chunk in response.iter_raw(READ_CHUNK):
        if time.monotonic() >= deadline:
            raise DeadlineExceeded
        room = max_bytes - len(body)
        try:
            out, pending = decoder.feed(chunk, room + 1) if decoder else (chunk, False)
        except zlib.error as exc:
            raise RuntimeError(f"the {encoding} body from {response.url} is corrupt") from exc
        if len(out) > room or pending:
            body += out[:room]
            return bytes(body), True, decoded
        body += out
    return bytes(body), False, decoded


def bounded_headers(headers: httpx.Headers) -> dict[str, str]:
    """The first ``RESULT_MAX_HEADERS`` header names (lower case), each value cut to
    ``RESULT_HEADER_CHARS``; a repeated header's values joined by ", " (Set-Cookie's by a
    newline: its values hold commas)."""
    kept: dict[str, str] = {}
    for name, value in headers.multi_items():
        if name in kept:
            joined = kept[name] + ("\n" if name == "set-cookie" else ", ") + value
            kept[name] = joined[:RESULT_HEADER_CHARS]
        elif len(kept) < RESULT_MAX_HEADERS:
            kept[name] = value[:RESULT_HEADER_CHARS]
    return kept


# -- the title ----------------------------------------------------------------------------------

_ASCII_SPACE = re.compile(r"[\t\n\f\r ]+")
SNIFF_BYTES = 64 * 1024  # an undeclared page's charset is guessed from this much of it


def decode_html(body: bytes, content_type: str | None) -> str:
    """The page's text as a browser decodes it (w3lib's html_to_unicode): a BOM, else the
    Content-Type charset, else a <meta> one, else UTF-8 if the start of the body is valid
    UTF-8 and Windows-1252 if not. Charset names are the WHATWG's labels, so ``iso-8859-1`` and
    ``latin1`` are Windows-1252 (curly quotes and the euro sign, not C1 controls). Bytes the
    charset cannot decode become U+FFFD."""
    return html_to_unicode(content_type, body, auto_detect_fun=_sniff)[1]


def _sniff(body: bytes) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(body[:SNIFF_BYTES], final=len(body) <= SNIFF_BYTES)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


class _TitleParser(HTMLParser):
    """Collects the text of the first <title> outside <svg>. The title's content is text to a
    browser (RCDATA): a tag inside it is kept as written, whichever way this Python's parser
    reports it."""

    def __init__(self, keep_chars: int) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.found = False
        self.done = False
        self._inside = False
        self._svg = 0
        self._room = keep_chars

    def _keep(self, text: str) -> None:
        if self._room > 0:
            self.parts.append(text[: self._room])
            self._room -= len(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._inside:
            self._keep(self.get_starttag_text() or "")
        elif tag == "svg":
            self._svg += 1
        elif tag == "title" and not self._svg and not self.done:
            self._inside = self.found = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._inside:
            self._keep(self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        if self._inside:
            if tag == "title":
                self._inside = False
                self.done = True
            else:
                self._keep(f"</{tag}>")
        elif tag == "svg" and self._svg:
            self._svg -= 1

    def handle_data(self, data: str) -> None:
        if self._inside:
            self._keep(data)


def parse_title(body: bytes, content_type: str | None = None) -> str | None:
    """The page's title as ``document.title`` gives it (entities decoded, ASCII whitespace
    collapsed and stripped), cut to ``TITLE_MAX_CHARS``; None when the page has no <title>."""
    head = body[:TITLE_SCAN_BYTES]
    text = decode_html(head, content_type)
    # Collapsing can only shorten the text: keep a margin of raw characters beyond the cap.
    parser = _TitleParser(keep_chars=4 * TITLE_MAX_CHARS)
    for start in range(0, len(text), READ_CHUNK):
        parser.feed(text[start : start + READ_CHUNK])
        if parser.done:
            break
    else:
        parser.close()
    if not parser.found:
        return None
    title = _ASCII_SPACE.sub(" ", "".join(parser.parts)).strip(" ")
    return title[:TITLE_MAX_CHARS]


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


# -- the transport: a pool per proxy, every socket operation under the request's deadline -------


def _request_deadline() -> float | None:
    return _DEADLINE.get()


def _addresses(host: str, port: int, *, proxy: str | None) -> list[str]:
    """The host's addresses, resolved within the request's deadline and checked by its egress
    rule (``proxy``: the proxy this connection goes to, None for direct): the connection goes
    to these and no others, so what was checked is what is reached."""
    try:
        found = resolve_within(system_addresses, host, port, _DEADLINE.get())
    except TimeoutError as exc:  # before OSError, which it is
        raise httpcore.ConnectTimeout(str(exc)) from None
    except (OSError, UnicodeError, ValueError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
    egress = _EGRESS.get()
    if egress is not None and (proxy is None or egress.checks_proxy(proxy)):
        reason = egress.refusal(host, found)
        if reason is not None:
            raise EgressRefused(reason if proxy is None else f"{reason} (the job's proxy)")
    return [str(address) for address in found]


def split_proxy(proxy: str) -> tuple[str, tuple[str, str] | None]:
    """The proxy URL without its credentials, and the credentials (percent-decoded)."""
    parts = urlsplit(proxy)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    bare = urlunsplit((parts.scheme.lower(), netloc, "", "", ""))
    if parts.username is None:
        return bare, None
    return bare, (unquote(parts.username), unquote(parts.password or ""))


@dataclass
class _Pool:
    pool: httpcore.ConnectionPool | httpcore.HTTPProxy | httpcore.SOCKSProxy
    users: int = 0
    dropped: bool = False


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response, request: httpx.Request, done: _Done) -> None:
        self._response = response
        self._request = request
        self._done = done

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors(self._request):
            yield from self._response.iter_stream()

    def close(self) -> None:
        try:
            self._response.close()
        finally:
            self._done()


class _Done:
    """Releases a pool once, however many times the response is closed."""

    def __init__(self, transport: PoolingTransport, entry: _Pool) -> None:
        self._transport = transport
        self._entry: _Pool | None = entry

    def __call__(self) -> None:
        entry, self._entry = self._entry, None
        if entry is not None:
            self._transport._release(entry)


class PoolingTransport(httpx.BaseTransport):
    """An httpx transport with a connection pool per proxy (the request's ``PROXY_EXTENSION``,
    None for direct), every connection under the request's deadline."""

    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        self._ssl_context = ssl_context
        self._pools: OrderedDict[str | None, _Pool] = OrderedDict()
        self._lock = threading.Lock()

    def _new_pool(self, proxy: str | None) -> _Pool:
        # Its own backend: whether the address it connects to is checked depends on the proxy.
        backend = DeadlineBackend(functools.partial(_addresses, proxy=proxy), _request_deadline)
        if proxy is None:
            return _Pool(
                httpcore.ConnectionPool(
                    ssl_context=self._ssl_context,
                    max_connections=None,  # the consumer's threads bound the requests
                    max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                    network_backend=backend,
                )
            )
        url, auth = split_proxy(proxy)
        if url.startswith("socks5"):
            return _Pool(
                httpcore.SOCKSProxy(
                    proxy_url=url,
                    proxy_auth=auth,
                    ssl_context=self._ssl_context,
                    max_connections=None,
                    max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                    network_backend=backend,
                )
            )
        return _Pool(
            httpcore.HTTPProxy(
                proxy_url=url,
                proxy_auth=auth,
                ssl_context=self._ssl_context,
                # TLS to the proxy itself for an https:// proxy (refused for http://).
                proxy_ssl_context=self._ssl_context if url.startswith("https:") else None,
                max_connections=None,
                max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
                network_backend=backend,
            )
        )

    def _acquire(self, proxy: str | None) -> _Pool:
        dropped: list[_Pool] = []
        with self._lock:
            entry = self._pools.get(proxy)
            if entry is None:
                entry = self._pools[proxy] = self._new_pool(proxy)
                while len(self._pools) > MAX_POOLS:
                    _, old = self._pools.popitem(last=False)
                    old.dropped = True
                    if old.users == 0:
                        dropped.append(old)
            self._pools.move_to_end(proxy)
            entry.users += 1
        for old in dropped:
            old.pool.close()
        return entry

    def _release(self, entry: _Pool) -> None:
        with self._lock:
            entry.users -= 1
            close = entry.dropped and entry.users == 0
        if close:
            entry.pool.close()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        proxy = request.extensions.get(PROXY_EXTENSION)
        url = request.url
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions={k: v for k, v in request.extensions.items() if k != PROXY_EXTENSION},
        )
        entry = self._acquire(proxy)
        try:
            with httpx_errors(request):
                core_response = entry.pool.handle_request(core_request)
        except BaseException:
            self._release(entry)
            raise
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_ResponseStream(core_response, request, _Done(self, entry)),
            extensions=core_response.extensions,
        )

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for entry in pools:
            entry.pool.close()
