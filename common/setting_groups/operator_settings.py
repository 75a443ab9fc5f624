"""Settings of what people see of the fleet: log lines, metrics, and the dashboard (where it
listens, its token and sessions, the proxies and host names it trusts).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A host name: dot-separated labels of letters, digits and '-' (the CLI's host names too).
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


class OperatorSettings(BaseModel):
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR")
    log_format: Literal["text", "json"] = Field(
        default="text", description="text: key=value lines for people; json: one object a line"
    )

    # Metrics (Prometheus), one port per daemon.
    metrics_port: int = Field(default=0, ge=0, le=65535, description="0 = no metrics endpoint")
    metrics_address: str = Field(
        default="127.0.0.1", min_length=1, description="where /metrics listens"
    )
    metrics_refresh_s: float = Field(
        default=10.0, gt=0, description="producer: job/host gauges from SQL"
    )

    # Traces (OpenTelemetry): on with the standard OTEL_* variables (common.tracing).
    trace_full_urls: bool = Field(
        default=False,
        description="true -> a page load's span keeps its URL's query string (user info"
        " never); tracing itself is on when OTEL_EXPORTER_OTLP_ENDPOINT names a collector",
    )

    # Dashboard (`scrapefleet dashboard`).
    dashboard_address: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="where `scrapefleet dashboard` listens (a non-loopback address needs"
        " dashboard_allow_remote)",
    )
    dashboard_port: int = Field(default=8080, ge=1, le=65535, description="the dashboard's port")
    # At least 16 characters: checked in common.settings, with the webhooks' secrets.
    dashboard_token: SecretStr | None = Field(
        default=None, description="required by every control; unset -> read-only dashboard"
    )
    dashboard_read_needs_token: bool = Field(
        default=False,
        description="true -> every page needs dashboard_token too (one login per browser"
        " session), not only the controls",
    )
    dashboard_session_idle_s: float = Field(
        default=28800.0,
        gt=0,
        description="a browser's dashboard session (form token, unlocked controls) ends after"
        " this long unused; sessions live in memory, so a restart ends them all",
    )
    dashboard_proxies: int = Field(
        default=0,
        ge=0,
        le=5,
        description="reverse proxies in front whose X-Forwarded-For/-Proto/-Host/-Port/-Prefix"
        " are trusted; 0 -> those headers are ignored",
    )
    dashboard_allow_remote: bool = Field(
        default=False,
        description="allow dashboard_address to be a non-loopback address (also"
        " --allow-remote); put TLS in front",
    )
    dashboard_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host names the dashboard answers to besides IP addresses and localhost"
        " (a DNS-rebinding page's name is refused)",
    )

    @field_validator("dashboard_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        for item in value:
            if not HOST_NAME.fullmatch(item):
                raise ValueError(f"{item!r} is not a host name (no scheme, port or path)")
        return [item.lower().rstrip(".") for item in value]

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return value.upper()
