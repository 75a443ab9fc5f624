"""Params of the built-in browser actions, declared here so that ``submit`` validates them
without importing Selenium; the consumer's ``selenium_actions`` registers the functions that
run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scrapefleet.common.actions.page_fields import BrowserPageFields, FieldSpec
from scrapefleet.common.actions.registry import register
from scrapefleet.common.errors import ScrapefleetError

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
    fields: BrowserPageFields = Field(
        default_factory=dict, description="common.actions.page_fields"
    )
    allow_http_errors: bool = False

    _url = field_validator("url")(validate_web_url)


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
        "browser actions run in scrapefleet.consumer"
        " (import scrapefleet.consumer.browser.actions.selenium_actions)"
    )


register("fetch_page", FetchPageParams, needs_browser=True)(_runs_on_a_consumer)
register("screenshot", ScreenshotParams, needs_browser=True)(_runs_on_a_consumer)
