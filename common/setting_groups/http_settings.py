"""Settings of ``http_get`` and crawls: a host's defaults for what a job's own params do not say
(User-Agent and contact, proxy, timeout, body size), the addresses requests may reach, and what a
crawl obeys.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from scrapefleet.common.http.params import validate_proxy_url, validate_user_agent


class HttpSettings(BaseModel):
    # http_get (common/http/client.py): the host's defaults; a job's own params win.
    http_user_agent: str = Field(
        default="scrapefleet/0.1",
        description="`http_get`'s User-Agent unless the job sets `user_agent`",
    )
    http_contact_url: str | None = Field(
        default=None,
        description=(
            "a page or `mailto:` where sites reach the fleet's operator, sent in "
            "the User-Agent (`scrapefleet/0.1 (+URL)`); unset -> none"
        ),
    )
    http_proxy: SecretStr | None = Field(
        default=None,
        description=(
            "`http://`, `https://` or `socks5://` URL (`user:password@` allowed) "
            "every `http_get` goes through unless the job sets `proxy`; unset -> "
            "direct"
        ),
    )
    http_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description=(
            "one `http_get`, whole: connect, redirects and the last body byte, "
            "unless the job sets `timeout_s`"
        ),
    )
    http_max_body_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description=(
            "an `http_get` body is read up to this (decompressed); the rest is cut (`truncated`)"
        ),
    )
    # Each one a network: checked in common.settings, with webhook_allow_networks.
    http_allow_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="CIDRs http_get, crawl and robots.txt requests may reach although internal"
        " (loopback, private, link-local, ...), also through a redirect; unset -> only public"
        " addresses. An intranet fleet: 10.0.0.0/8,192.168.0.0/16; no rule: 0.0.0.0/0,::/0",
    )
    # Crawls (common.crawl.action): what a crawl obeys unless told otherwise.
    crawl_obey_robots: bool = Field(
        default=True,
        description=(
            "crawls read each site's robots.txt and skip what it disallows (docs/crawling.md)"
        ),
    )
    crawl_robots_token: str | None = Field(
        default=None,
        pattern=r"^[^\s/();]+$",
        description=(
            "the product token robots.txt groups are matched on (`User-agent: TOKEN`);"
            " unset -> the User-Agent's own (`scrapefleet` of `scrapefleet/0.1 (+URL)`)"
        ),
    )
    # a crawled site's jobs queued or running at once, by default
    crawl_site_concurrency: int | None = Field(
        default=2,
        ge=1,
        description=(
            "a crawled site's jobs queued or running at once, fleet-wide, unless "
            "`rate_limits`/`rate_limit_default` give it limits; 0, `none` or (in the "
            "environment) empty -> no limit"
        ),
    )

    @field_validator("crawl_site_concurrency", mode="before")
    @classmethod
    def _no_crawl_limit(cls, value: Any) -> Any:
        # TOML has no null and an environment variable no None: 0, "none" or an empty value
        # is how a file or the environment says "no limit".
        if isinstance(value, str) and value.strip().lower() in ("", "none", "0"):
            return None
        if value == 0 and not isinstance(value, bool):
            return None
        return value

    @field_validator("http_proxy")
    @classmethod
    def _proxy_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        validate_proxy_url(value.get_secret_value())
        return value

    @field_validator("http_user_agent")
    @classmethod
    def _user_agent(cls, value: str) -> str:
        return validate_user_agent(value)

    @field_validator("http_contact_url")
    @classmethod
    def _contact(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("http://", "https://", "mailto:")):
            raise ValueError("must start with http://, https:// or mailto:")
        return validate_user_agent(value)

    def http_agent(self) -> str:
        """The User-Agent http_get and crawls send: the product, and the contact if set."""
        if self.http_contact_url is None:
            return self.http_user_agent
        return f"{self.http_user_agent} (+{self.http_contact_url})"
