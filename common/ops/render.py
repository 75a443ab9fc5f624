"""Plain-text renderings shared by the CLI and the demo."""

from __future__ import annotations

from typing import Any

from scrapefleet.common.host_status import takes_browser_jobs


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
            f"{h['capacity']:>5}{h['completed_last_hour']:>9}  {h.get('browser') or '-':<9}"
        )
    if not hosts:
        lines.append("(no hosts: `scrapefleet hosts add NAME`, or start a consumer)")
    for h in hosts:
        if h.get("browser") == "failing":
            retry = h.get("browser_retry_at")
            when = f", next try {retry:%H:%M:%S %Z}" if retry else ""
            lines.append(f"{h['host']}: browser failing: {h.get('browser_reason') or '?'}{when}")
    takers = [h for h in hosts if h["state"] == "active" and takes_browser_jobs(h.get("browser"))]
    if pending_browser and not takers:
        lines.append(
            f"{pending_browser} browser job(s) pending: no active host can run browser jobs now"
        )
    return "\n".join(lines)
