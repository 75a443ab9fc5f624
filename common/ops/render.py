"""Plain-text renderings shared by the CLI and the demo."""

from __future__ import annotations

from typing import Any


def render_status(counts: dict[str, int], hosts: list[dict[str, Any]]) -> str:
    lines = ["jobs:  " + "  ".join(f"{s} {n}" for s, n in counts.items())]
    lines.append(f"{'host':<16}{'state':<12}{'running':>8}{'queued':>8}{'cap':>5}{'done/1h':>9}")
    for h in hosts:
        lines.append(
            f"{h['host']:<16}{h['state']:<12}{h['running']:>8}{h['queued']:>8}"
            f"{h['capacity']:>5}{h['completed_last_hour']:>9}"
        )
    if not hosts:
        lines.append("(no hosts: `scrapefleet hosts add NAME`, or start a consumer)")
    return "\n".join(lines)
