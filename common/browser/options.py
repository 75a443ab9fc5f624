"""What a browser job may ask of its browser: the payload key ``browser``, one validated model.

    {"url": "https://example.com", "browser": {"user_agent": "...", "proxy": "socks5://h:1080",
     "headers": {"X-Team": "prices"}, "cookies": [{"name": "consent", "value": "yes"}],
     "window": {"width": 1280, "height": 900}, "locale": "de-DE", "timezone": "Europe/Berlin",
     "block": ["images", "fonts"]}}

Every browser action takes it, built-in or user-defined: the runner applies it to the job's
browser before the action runs (scrapefleet.consumer.browser.actions.job_setup), so an action never
sees it. The host's ``browser_*`` settings are defaults; each option the job sets wins, and its
``headers`` are merged over the host's by name.

Pure and free of Selenium, so that ``submit`` refuses bad options (the field named, nothing
inserted) without a browser.
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from scrapefleet.common.browser.profile_names import validate_profile_choice
from scrapefleet.common.http.params import (
    MAX_COOKIE_VALUE_CHARS,
    MAX_COOKIES,
    MAX_HEADER_NAME_CHARS,
    validate_headers,
    validate_proxy_url,
    validate_user_agent,
)

BROWSER_KEY = "browser"  # the payload key a browser job may set
BlockType = Literal["images", "fonts", "media"]
# The schemes Chromium's proxy settings speak. socks5h is accepted as socks5: Chromium always
# resolves names on a SOCKS5 proxy's side.
BROWSER_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
MIN_WINDOW_PX, MAX_WINDOW_WIDTH_PX, MAX_WINDOW_HEIGHT_PX = 100, 7680, 4320
MAX_LOCALE_CHARS = 35
# BCP 47 as browsers take it: a language, then subtags (de, de-DE, zh-Hant-TW, sr-Latn).
_LOCALE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_COOKIE_VALUE = re.compile(r"[\x20-\x3a\x3c-\x7e]*")
_DOMAIN = re.compile(r"\.?[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9\-]{1,63})*")


def validate_browser_proxy(value: str) -> str:
    """An http, https or socks5 proxy URL; SOCKS credentials are refused (Chromium has no SOCKS
    authentication, so they would be dropped silently)."""
    validate_proxy_url(value)
    parts = urlsplit(value)
    if parts.scheme.lower() not in BROWSER_PROXY_SCHEMES:
        raise ValueError("scheme must be http, https or socks5")
    if parts.scheme.lower().startswith("socks") and (parts.username or parts.password):
        raise ValueError("a socks5 proxy cannot take credentials in Chromium (use an http proxy)")
    return value


def validate_locale(value: str) -> str:
    if len(value) > MAX_LOCALE_CHARS or not _LOCALE.fullmatch(value):
        raise ValueError("must be a BCP 47 language tag such as en-US or de-DE")
    return value


def validate_timezone(value: str) -> str:
    """An IANA zone name (Europe/Berlin, UTC), as the tz database knows it."""
    if not value or value.startswith(("/", ".")) or ".." in value:
        raise ValueError("must be an IANA time zone name such as Europe/Berlin")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError("must be an IANA time zone name such as Europe/Berlin") from None
    return value


class CookieSpec(BaseModel):
    """A cookie set in the job's browser before its first load."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_HEADER_NAME_CHARS)
    value: str = Field(default="", max_length=MAX_COOKIE_VALUE_CHARS)
    domain: str | None = Field(
        default=None, max_length=253, description="unset -> the host of the payload's url"
    )
    path: str = Field(default="/", min_length=1, max_length=1024)
    secure: bool = False
    http_only: bool = False
    same_site: Literal["strict", "lax", "none"] | None = None
    expiry: int | None = Field(default=None, gt=0, description="Unix seconds; unset -> session")

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        if not _TOKEN.fullmatch(value):
            raise ValueError("must be a cookie name (letters, digits and !#$%&'*+-.^_`|~)")
        return value

    @field_validator("value")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not _COOKIE_VALUE.fullmatch(value):
            raise ValueError("must be printable ASCII without ';'")
        return value

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str | None) -> str | None:
        if value is not None and not _DOMAIN.fullmatch(value):
            raise ValueError("must be a host name such as example.com or .example.com")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or not _COOKIE_VALUE.fullmatch(value):
            raise ValueError("must start with / and be printable ASCII without ';'")
        return value


class WindowSize(BaseModel):
    """The page's viewport in CSS pixels (what layout and screenshots see)."""

    model_config = ConfigDict(extra="forbid")

    width: int = Field(ge=MIN_WINDOW_PX, le=MAX_WINDOW_WIDTH_PX)
    height: int = Field(ge=MIN_WINDOW_PX, le=MAX_WINDOW_HEIGHT_PX)


class BrowserOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user_agent: str | None = None
    proxy: str | None = Field(
        default=None, description="http://, https:// or socks5:// URL; user:password@ for http(s)"
    )
    headers: dict[str, str] = Field(default_factory=dict, description="sent with every request")
    cookies: list[CookieSpec] = Field(default_factory=list, max_length=MAX_COOKIES)
    window: WindowSize | None = None
    locale: str | None = None
    timezone: str | None = None
    block: list[BlockType] = Field(default_factory=list, description="resource types not loaded")
    # A persistent identity (scrapefleet.common.browser.profile_names): a name, or a pool to pick
    # one from.
    profile: str | list[str] | None = Field(default=None, description="name or list of names")

    _headers = field_validator("headers")(validate_headers)

    @field_validator("user_agent", "proxy", "locale", "timezone")
    @classmethod
    def _checked(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:  # unset: the host's default, if any
            return None
        return _CHECKS[str(info.field_name)](value)

    @field_validator("profile", mode="before")
    @classmethod
    def _profile(cls, value: object) -> str | list[str] | None:
        return validate_profile_choice(value)

    @field_validator("block")
    @classmethod
    def _unique(cls, value: list[BlockType]) -> list[BlockType]:
        return sorted(set(value))

    @model_validator(mode="after")
    def _distinct_cookies(self) -> BrowserOptions:
        keys = [(c.name, c.domain, c.path) for c in self.cookies]
        if len(set(keys)) != len(keys):
            raise ValueError("cookies: one cookie is given twice (same name, domain and path)")
        return self

    @property
    def empty(self) -> bool:
        return self == NO_OPTIONS

    def over(self, defaults: BrowserOptions) -> BrowserOptions:
        """These options with ``defaults`` filling what they leave unset; headers merged by
        name (case-insensitively), this side winning."""
        mine = self.model_dump(exclude_unset=True, exclude_none=True)
        merged = defaults.model_dump(exclude_none=True)
        if "headers" in mine:
            ours = {name.lower() for name in mine["headers"]}
            kept = {k: v for k, v in defaults.headers.items() if k.lower() not in ours}
            mine["headers"] = {**kept, **mine["headers"]}
        merged.update(mine)
        return BrowserOptions.model_validate(merged)


_CHECKS = {
    "user_agent": validate_user_agent,
    "proxy": validate_browser_proxy,
    "locale": validate_locale,
    "timezone": validate_timezone,
}
NO_OPTIONS = BrowserOptions()


def cookie_domains_filled(options: BrowserOptions, payload: dict[str, Any]) -> BrowserOptions:
    """Cookies without a domain get the host of the payload's ``url``; ValueError naming the
    cookie when there is none to take."""
    if all(cookie.domain for cookie in options.cookies):
        return options
    url = payload.get("url")
    host = urlsplit(url).hostname if isinstance(url, str) else None
    cookies = []
    for index, cookie in enumerate(options.cookies):
        if cookie.domain is None:
            if not host:
                raise ValueError(
                    f"cookies.{index}.domain: required when the payload has no url to take it from"
                )
            cookie = cookie.model_copy(update={"domain": host})
        cookies.append(cookie)
    return options.model_copy(update={"cookies": cookies})
