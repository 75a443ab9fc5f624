"""An action only some consumers load (their ``actions`` setting names this module): a kind
one host runs and another does not."""

from __future__ import annotations

from typing import Any

from scrapefleet.common.actions.registry import FreeParams, register


@register("prices", light=True)
def prices(params: FreeParams) -> dict[str, Any]:
    return {"price": 42}
