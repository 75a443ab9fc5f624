"""Settings from environment variables (SCRAPEFLEET_*) and an optional TOML file.

Precedence: keyword arguments > environment > TOML file (``--config``, else SCRAPEFLEET_CONFIG)
> each field's default. Whatever is wrong (a value out of its bounds, a key of the file or a
SCRAPEFLEET_* variable that is no setting) raises one SettingsError line naming the setting.

Each setting, its default, its bounds and its own checks are written once, on its field, in the
group it belongs to (common.setting_groups: database, fleet, producer, consumer, http, browser,
operator; a default that code elsewhere needs too comes from common.constants, and
``setting_default`` reads any default without a Settings). This module puts the groups together
into Settings, holds the checks written once for fields of several groups (list settings given
comma-separated or as JSON, allow-lists of networks, secrets' length), and loads it: the file,
the environment, and one line for whatever is wrong.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as EnvParseError

from scrapefleet.common.errors import SettingsError
from scrapefleet.common.http.address_policy import parse_networks
from scrapefleet.common.setting_groups.browser_settings import BrowserSettings
from scrapefleet.common.setting_groups.consumer_settings import ConsumerSettings
from scrapefleet.common.setting_groups.database_settings import DatabaseSettings
from scrapefleet.common.setting_groups.fleet_settings import FleetSettings
from scrapefleet.common.setting_groups.http_settings import HttpSettings
from scrapefleet.common.setting_groups.operator_settings import OperatorSettings
from scrapefleet.common.setting_groups.producer_settings import ProducerSettings

CONFIG_ENV = "SCRAPEFLEET_CONFIG"
ENV_PREFIX = "SCRAPEFLEET_"
# The project's own variables that are not settings, so not refused as unknown: the config
# file; the browser stack's process markers (set in the Grid's environment and inherited by all
# it starts); the test and benchmark harnesses' knobs, which reach the daemons they start.
NOT_SETTINGS = frozenset(
    {
        CONFIG_ENV,
        "SCRAPEFLEET_STACK_TOKEN",
        "SCRAPEFLEET_STACK_DIR",
        "SCRAPEFLEET_FLEET_RUN",
        "SCRAPEFLEET_FLEET_MODE",
        "SCRAPEFLEET_DOCS_SCREENSHOTS",
    }
)
NOT_SETTINGS_PREFIXES = ("SCRAPEFLEET_TEST_", "SCRAPEFLEET_BENCH_")


# The groups in reverse: pydantic orders a model's fields from its last base to its first, and
# the settings reference lists them in that order (database first, the dashboard last).
class Settings(
    OperatorSettings,
    BrowserSettings,
    HttpSettings,
    ConsumerSettings,
    ProducerSettings,
    FleetSettings,
    DatabaseSettings,
    BaseSettings,
):
    # allow_inf_nan=False: "1e999" parses as infinity, which no timeout or interval means.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, allow_inf_nan=False
    )

    @field_validator("dashboard_token", "webhook_secret", "webhook_secret_previous")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        # An empty string in the environment means "unset", not "a token that is empty".
        if value is None or value.get_secret_value() == "":
            return None
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @field_validator(
        "actions",
        "webhook_allow_networks",
        "http_allow_networks",
        "dashboard_hosts",
        "browser_block",
        "block_statuses",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # The documented form, SCRAPEFLEET_ACTIONS=mypkg.scrapers:prices, is not JSON.
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"not a JSON list ({exc.msg}); or give items separated by commas"
                ) from None
        return [item.strip() for item in text.split(",") if item.strip()]

    @field_validator("webhook_allow_networks", "http_allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        parse_networks(value)  # the egress rule's own reading: what passes here, it can use
        return value


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build Settings, turning any validation problem into one SettingsError line."""
    file_values: dict[str, Any] = {}
    path = config_file or os.environ.get(CONFIG_ENV)
    if path:
        try:
            with open(path, "rb") as handle:
                file_values = tomllib.load(handle)
        except OSError as exc:
            raise SettingsError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {path}: {exc}") from None
    unknown_environment_check(os.environ)
    # Environment beats the file: drop file keys that the environment sets.
    for key in list(file_values):
        if f"{ENV_PREFIX}{key.upper()}" in os.environ:
            del file_values[key]
    try:
        return Settings(**{**file_values, **overrides})
    except ValidationError as exc:
        raise SettingsError(_first_problem(exc)) from None
    except EnvParseError as exc:  # pydantic-settings' own, raised before validation
        raise SettingsError(f"invalid setting: {exc}") from None


def unknown_environment_check(environ: Mapping[str, str]) -> None:
    """Refuse a SCRAPEFLEET_* variable that is no setting, naming it: a typo would otherwise
    leave the setting at its default without a word (an unknown TOML key is refused too)."""
    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper in NOT_SETTINGS:
            continue
        if upper.startswith(NOT_SETTINGS_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SettingsError(f"unknown setting {key} in the environment{hint}")


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    name = ".".join(str(p) for p in err["loc"]) or "settings"
    env = f"{ENV_PREFIX}{str(err['loc'][0]).upper()}" if err["loc"] else ENV_PREFIX
    if err["type"] == "extra_forbidden":
        return f"unknown setting {name!r}"
    message = str(err["msg"]).removeprefix("Value error, ")  # pydantic's, for our own checks
    return f"invalid setting {name} ({env}): {message}"


def setting_default(name: str) -> Any:
    """A setting's default as its field declares it: code that needs it outside a Settings
    (a function's default argument, a test's expectation) reads it here, never a copy."""
    return Settings.model_fields[name].default
