"""The tracing reference page (docs/reference/tracing.md), from common.tracing_names: beside
tools.reference (which lists it in its PAGES and imports it when it writes the pages), since
that module is at its size limit."""

from __future__ import annotations

import importlib

from tools.reference import GENERATED, _cell

TRACING_MODULE = "scrapefleet.common.tracing_names"


def tracing_page() -> str:
    names = importlib.import_module(TRACING_MODULE)
    lines = [
        GENERATED.format(source=f"`SPANS` and `ATTRIBUTES` in `{TRACING_MODULE}`"),
        "# Spans and attributes",
        "",
        "One trace per job, when tracing is on (the standard `OTEL_*` variables name an OTLP",
        "endpoint and the `otel` extra is installed): how to turn it on, send it to a collector",
        "and read it: [Tracing](../how-to/tracing.md).",
        "",
        "## Spans",
        "",
        "| span | what it covers |",
        "|---|---|",
        *(f"| `{name}` | {_cell(text)} |" for name, text in names.SPANS.items()),
        "",
        "## Attributes",
        "",
        "| attribute | what it holds |",
        "|---|---|",
        *(f"| `{name}` | {_cell(text)} |" for name, text in names.ATTRIBUTES.items()),
    ]
    return "\n".join(lines).rstrip() + "\n"
