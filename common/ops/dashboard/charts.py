"""Throughput charts as inline SVG, built on the server: no JavaScript, no chart library.

Pure functions: buckets in, markup out. Each bar carries a <title>, which browsers show as a
tooltip, so the exact figures are there without any script.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from markupsafe import Markup

COMPLETED_COLOUR = "#2e7d32"
FAILED_COLOUR = "#c62828"


@dataclass(frozen=True)
class Window:
    name: str  # "hour", "day", "week"
    step_s: int  # one bar
    bars: int
    label_format: str  # strftime of a bar's start, in UTC


WINDOWS = (
    Window("hour", 300, 12, "%H:%M"),
    Window("day", 3600, 24, "%H:00"),
    Window("week", 86400, 7, "%a %d"),
)


@dataclass(frozen=True)
class Bar:
    start: datetime
    completed: int
    failed: int


def bucket_starts(window: Window, now: datetime) -> list[int]:
    """Epoch seconds of each bar's start, oldest first; the last bar holds ``now``."""
    current = int(now.timestamp()) // window.step_s * window.step_s
    return [current - window.step_s * i for i in range(window.bars - 1, -1, -1)]


def fill_bars(window: Window, now: datetime, counts: dict[tuple[int, str], int]) -> list[Bar]:
    return [
        Bar(
            datetime.fromtimestamp(start, UTC),
            counts.get((start, "completed"), 0),
            counts.get((start, "failed"), 0),
        )
        for start in bucket_starts(window, now)
    ]


def bar_chart(window: Window, bars: list[Bar], width: int = 360, height: int = 150) -> Markup:
    """Stacked bars (completed below, failed on top) with a scale and first/last labels."""
    top, bottom, left = 14, 18, 4
    plot_h = height - top - bottom
    peak = max((b.completed + b.failed for b in bars), default=0) or 1
    slot = (width - left * 2) / max(len(bars), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img"'
        f' aria-label="jobs finished per bar, last {escape(window.name)}">',
        f'<text x="{left}" y="10" font-size="10" fill="#555">max {peak}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - left}" y2="{top + plot_h}"'
        ' stroke="#999"/>',
    ]
    for i, bar in enumerate(bars):
        x = left + i * slot + 1
        w = max(slot - 2, 1)
        y: float = top + plot_h
        label = bar.start.strftime(window.label_format)
        tip = escape(f"{label} UTC: {bar.completed} completed, {bar.failed} failed")
        parts.append(f"<g><title>{tip}</title>")
        for count, colour in ((bar.completed, COMPLETED_COLOUR), (bar.failed, FAILED_COLOUR)):
            h = plot_h * count / peak
            if h > 0:
                y -= h
                parts.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}"'
                    f' fill="{colour}"/>'
                )
        # An empty bar still gets a hit area, so its tooltip (0 and 0) is reachable.
        parts.append(
            f'<rect x="{x:.1f}" y="{top}" width="{w:.1f}" height="{plot_h}" fill="transparent"/>'
        )
        parts.append("</g>")
    if bars:
        first = escape(bars[0].start.strftime(window.label_format))
        last = escape(bars[-1].start.strftime(window.label_format))
        parts.append(f'<text x="{left}" y="{height - 4}" font-size="10" fill="#555">{first}</text>')
        parts.append(
            f'<text x="{width - left}" y="{height - 4}" font-size="10" fill="#555"'
            f' text-anchor="end">{last}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
