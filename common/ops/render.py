"""Plain-text renderings shared by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapefleet.common.reads.producer_status import delivery_state
from scrapefleet.common.status.document import takes_browser_jobs


def render_status(
    counts: dict[str, int], hosts: list[dict[str, Any]], pending_browser: int = 0
) -> str:
    lines = ["jobs:  " + "  ".join(f"{s} {n}" for s, n in counts.items())]
    lines.append(
        f"{'host':<16}{'state':<12}{'running':>8}{'queued':>8}{'cap':>5}{'done/1h':>9}"
        f"  {'browser':<9}"
    )
    for h in hosts:
        lines.append(
            f"{h['host']:<16}{h['state']:<12}{h['running']:>8}{h['queued']:>8}"
            f"{h['capacity']:>5}{h['completed_last_hour']:>9}"
            f"  {_browser_cell(h, _limit_matters(h, pending_browser))}"
        )
    if not hosts:
        lines.append("(no hosts: `scrapefleet hosts add NAME`, or start a consumer)")
    for h in hosts:
        if h.get("browser") == "failing":
            retry = h.get("browser_retry_at")
            when = f", next try {retry:%H:%M:%S %Z}" if retry else ""
            lines.append(f"{h['host']}: browser failing: {h.get('browser_reason') or '?'}{when}")
        elif h.get("browser_limit_reason") and _limit_matters(h, pending_browser):
            lines.append(f"{h['host']}: {h['browser_limit_reason']}")
    takers = [h for h in hosts if h["state"] == "active" and takes_browser_jobs(h.get("browser"))]
    if pending_browser and not takers:
        lines.append(
            f"{pending_browser} browser job(s) pending: no active host can run browser jobs now"
        )
    return "\n".join(lines)


def _limit_matters(host: dict[str, Any], pending_browser: int) -> bool:
    """Whether a host's browser-job limit says anything: its stack runs (or starts), or it is
    idle while browser jobs wait. An HTTP-only fleet's idle stacks never started a browser,
    and their starting limit ("taking 2 of 6 browser jobs") was noise there."""
    state = host.get("browser")
    return state in ("starting", "ready") or (state == "idle" and pending_browser > 0)


def _browser_cell(host: dict[str, Any], limit_matters: bool = True) -> str:
    """The stack's state, with the browser jobs it takes at once when fewer than capacity
    (a host short of CPU or memory: the line under the table says why)."""
    state = host.get("browser") or "-"
    limit = host.get("browser_limit")
    if limit_matters and limit is not None and limit < host["capacity"] and state != "failing":
        return f"{state} {limit}/{host['capacity']}"
    return state


def render_delivery(delivery: dict[str, Any], webhook_secret_set: bool | None) -> str:
    """One webhook delivery's state; a waiting one on a producer without a secret says so
    rather than "attempts 0, next attempt <a time long past>"."""
    code = f" (HTTP {delivery['response_code']})" if delivery.get("response_code") else ""
    error = f"; last error: {delivery['last_error']}" if delivery.get("last_error") else ""
    if delivery.get("delivered_at"):
        return f"delivered {delivery['delivered_at']:%Y-%m-%d %H:%M:%S}{code}"
    if delivery.get("gave_up_at"):
        return (
            f"gave up {delivery['gave_up_at']:%Y-%m-%d %H:%M:%S} after"
            f" {delivery['attempts']} attempts{code}{error}"
        )
    blocked = delivery_state(delivery, webhook_secret_set)
    if blocked is not None:
        return blocked
    at = delivery.get("next_attempt_at")
    when = f", next attempt {at:%Y-%m-%d %H:%M:%S}" if at else ""
    return f"attempts {delivery['attempts']}{when}{code}{error}"


def failure_group_lines(groups: list[dict[str, Any]]) -> Iterator[str]:
    """`scrapefleet failures`: one group a line, largest first, with an example to open."""
    yield (
        f"{'jobs':>6}  {'kind':<16} {'class':<12} {'first seen':<16} {'last seen':<16}"
        " example  error"
    )
    for g in groups:
        yield (
            f"{g['jobs']:>6}  {g['kind'][:16]:<16} {(g['error_class'] or '-'):<12}"
            f" {g['first_at']:%Y-%m-%d %H:%M} {g['last_at']:%Y-%m-%d %H:%M}"
            f" {g['example_job']:>7}  {g['error'][:120]}"
        )
