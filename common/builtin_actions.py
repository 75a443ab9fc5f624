"""Actions that need no browser: ``noop`` for benchmarks, ``http_get`` for plain pages."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from scrapefleet.common.actions import register

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


class NoopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sleep_s: float = Field(default=0.0, ge=0, le=3600)
    fail: bool = False  # raise, to exercise retries and failure handling


@register("noop", NoopParams)
def noop(params: NoopParams) -> dict[str, Any]:
    if params.sleep_s:
        time.sleep(params.sleep_s)
    if params.fail:
        raise RuntimeError("noop asked to fail")
    return {"ok": True}


class HttpGetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    fail_on_status: bool = True  # an HTTP status >= 400 fails the attempt (and so retries)

    @field_validator("url")
    @classmethod
    def _http_only(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value


@register("http_get", HttpGetParams)
def http_get(params: HttpGetParams) -> dict[str, Any]:
    request = urllib.request.Request(params.url, headers={"User-Agent": "scrapefleet/0.1"})
    try:
        with urllib.request.urlopen(request, timeout=params.timeout_s) as response:
            body = response.read()
            status, final_url = response.status, response.geturl()
    except urllib.error.HTTPError as exc:
        if params.fail_on_status:
            raise RuntimeError(f"HTTP {exc.code} from {params.url}") from None
        body, status, final_url = exc.read(), exc.code, exc.geturl()
    match = _TITLE.search(body)
    title = match.group(1).decode("utf-8", "replace").strip() if match else None
    return {"status": status, "final_url": final_url, "title": title, "bytes": len(body)}
