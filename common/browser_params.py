"""Params of the built-in browser actions, declared here so that ``submit`` validates them
without importing Selenium; the consumer's ``selenium_actions`` registers the functions that
run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scrapefleet.common.actions import register
from scrapefleet.common.errors import ScrapefleetError
from scrapefleet.common.page_fields import FieldSpec

__all__ = ["FetchPageParams", "FieldSpec", "ScreenshotParams", "validate_web_url"]


def validate_web_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return value


class FetchPageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    wait_for: str | None = Field(default=None, min_length=1, description="CSS selector")
    wait_timeout_s: float = Field(default=10.0, gt=0, le=300)
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    allow_http_errors: bool = False

    _url = field_validator("url")(validate_web_url)

    @field_validator("fields")
    @classmethod
    def _css_only(cls, value: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        # The browser reads fields in one script call with querySelector; XPath and re are
        # read from HTML (crawl, crawl_browser, http_get).
        for name, spec in value.items():
            if spec.css is None or spec.re is not None:
                raise ValueError(f"{name}: fetch_page reads fields by css (with attr, all)")
        return value


class ScreenshotParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    full_page: bool = True
    wait_for: str | None = Field(default=None, min_length=1)
    wait_timeout_s: float = Field(default=10.0, gt=0, le=300)
    output_dir: Path | None = Field(default=None, description="unset -> <artifacts>/screenshots")

    _url = field_validator("url")(validate_web_url)


def _runs_on_a_consumer(_driver: Any, _params: BaseModel) -> dict[str, Any]:
    raise ScrapefleetError(
        "browser actions run in scrapefleet.consumer (import scrapefleet.consumer.selenium_actions)"
    )


register("fetch_page", FetchPageParams, needs_browser=True)(_runs_on_a_consumer)
register("screenshot", ScreenshotParams, needs_browser=True)(_runs_on_a_consumer)
