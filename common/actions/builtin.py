"""Actions that need no browser: ``noop`` for benchmarks, ``http_get`` for plain pages."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scrapefleet.common.actions.page_fields import PageFields, read_fields
from scrapefleet.common.actions.registry import register
from scrapefleet.common.http.params import (
    validate_cookies,
    validate_headers,
    validate_proxy_url,
    validate_user_agent,
)

if TYPE_CHECKING:
    from scrapefleet.common.http import client as http_client
    from scrapefleet.common.settings import Settings


class NoopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sleep_s: float = Field(default=0.0, ge=0, le=3600)
    fail: bool = False  # raise, to exercise retries and failure handling


# Light unless it sleeps: the scheduler's own cost, measured without a thread per job.
@register("noop", NoopParams, light=lambda payload: not payload.get("sleep_s"))
def noop(params: NoopParams) -> dict[str, Any]:
    if params.sleep_s:
        time.sleep(params.sleep_s)
    if params.fail:
        raise RuntimeError("noop asked to fail")
    return {"ok": True}


class HttpGetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="whole request; unset -> http_timeout_s"
    )
    fail_on_status: bool = True  # an HTTP status >= 400 fails the attempt (and so retries)
    user_agent: str | None = Field(default=None, description="unset -> http_user_agent")
    proxy: str | None = Field(
        default=None, description="http(s):// or socks5:// URL; unset -> http_proxy"
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="sent to the URL's origin only, not across a redirect"
    )
    cookies: dict[str, str] = Field(
        default_factory=dict, description="sent to the URL's host only (Secure for https)"
    )
    fields: PageFields = Field(default_factory=dict, description="name -> spec: page_fields")
    obey_robots: bool = Field(
        default=False, description="skip the page if the site's robots.txt disallows it"
    )

    @field_validator("url")
    @classmethod
    def _http_only(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        if not urlsplit(value).hostname:
            raise ValueError("must name a host")
        return value

    _proxy = field_validator("proxy")(validate_proxy_url)
    _headers = field_validator("headers")(validate_headers)
    _cookies = field_validator("cookies")(validate_cookies)
    _user_agent = field_validator("user_agent")(validate_user_agent)


def fetch_page(params: HttpGetParams, settings: Settings | None = None) -> http_client.Fetched:
    """GET ``params.url`` as its job asks, the host's http_* settings filling the rest."""
    # Imported here: submitting jobs validates params only and needs neither httpx nor the
    # consumer's settings.
    from scrapefleet.common.http import client as http_client
    from scrapefleet.common.http.job_egress import Egress
    from scrapefleet.common.settings import load_settings

    settings = settings or load_settings()
    return http_client.fetch(
        params.url,
        timeout_s=params.timeout_s or settings.http_timeout_s,
        max_body_bytes=settings.http_max_body_bytes,
        user_agent=job_user_agent(params, settings),
        egress=Egress.from_settings(settings),
        proxy=job_proxy(params, settings),
        headers=params.headers,
        cookies=params.cookies,
        fail_on_status=params.fail_on_status,
    )


def job_user_agent(params: HttpGetParams, settings: Settings) -> str:
    """The User-Agent the job sends: its own, else the host's (with its contact)."""
    return params.user_agent or settings.http_agent()


def job_proxy(params: HttpGetParams, settings: Settings) -> str | None:
    """The proxy the job goes through: its own, else the host's, else none."""
    host_proxy = settings.http_proxy
    return params.proxy or (host_proxy.get_secret_value() if host_proxy else None)


@register("http_get", HttpGetParams)
def http_get(params: HttpGetParams) -> dict[str, Any]:
    from scrapefleet.common.http.page_text import decode_html, parse_title
    from scrapefleet.common.http.response_body import bounded_headers

    if params.obey_robots and (reason := _robots_skip(params)):
        return {"status": None, "final_url": None, "title": None, "skipped": reason}
    fetched = fetch_page(params)
    content_type = fetched.headers.get("content-type")
    title = parse_title(fetched.body, content_type) if fetched.decoded else None
    result = {
        "status": fetched.status,
        "final_url": fetched.final_url,
        "title": title,
        "bytes": len(fetched.body),
        "truncated": fetched.truncated,
        "headers": bounded_headers(fetched.headers),
    }
    if params.fields:  # read from the page's text as a browser decodes it
        html = decode_html(fetched.body, content_type) if fetched.decoded else ""
        result["fields"] = read_fields(html, fetched.final_url, params.fields)
    return result


def _robots_skip(params: HttpGetParams) -> str | None:
    """Why the site's robots.txt keeps this job's User-Agent off the page, or None."""
    from scrapefleet.common.crawl.robots import robots_agent, robots_skip, site_rules
    from scrapefleet.common.http.job_egress import Egress
    from scrapefleet.common.settings import load_settings

    settings = load_settings()
    user_agent = job_user_agent(params, settings)
    proxy = job_proxy(params, settings)
    egress = Egress.from_settings(settings)
    rules = site_rules(params.url, user_agent=user_agent, proxy=proxy, egress=egress)
    return robots_skip(rules, params.url, robots_agent(user_agent, settings.crawl_robots_token))
