"""Logging for the three entry points: one line per event, with key=value fields.

    log.info("job finished", extra=fields(job=42, host="h1", attempt=2))

``log_format = "text"`` (the default) writes ``time level logger message job=42 host=h1``, for
people at a terminal and for the journal; ``"json"`` writes one JSON object a line with the
same fields as keys, for a log shipper. A traceback stays inside its event: indented lines in
text, one ``exc`` string in JSON. Either way every line goes through common.masking: a URL's
password or token, an ``Authorization`` value never reach the journal, whoever logged them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from scrapefleet.common.masking import mask_text
from scrapefleet.common.tracing import LogTraceIds

# The structured fields, in the order text lines show them.
FIELDS = (
    "job",
    "kind",
    "host",
    "action",
    "attempt",
    "outcome",
    "duration_s",
    "reason",
    "status",
    "delivery",
    "from_state",
    "to_state",
    "trace_id",  # set by common.tracing.LogTraceIds while tracing is on
    "span_id",
)
_FIELD_PREFIX = "sf_"  # LogRecord attributes are shared with logging's own: keep ours apart


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call; None values are left out."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log field(s): {', '.join(sorted(unknown))}")
    return {_FIELD_PREFIX + k: v for k, v in values.items() if v is not None}


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {
        name: getattr(record, _FIELD_PREFIX + name)
        for name in FIELDS
        if hasattr(record, _FIELD_PREFIX + name)
    }


def _text_value(value: Any) -> str:
    text = mask_text(str(value))
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)  # quoted, so the line still splits on spaces
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        message = mask_text(record.getMessage()).replace("\n", "\n    ")
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in _record_fields(record).items())
        line = f"{at[:-4]}Z {record.levelname:<7} {record.name}: {message}"
        if extra:
            line += f" {extra}"
        if record.exc_info:
            trace = mask_text(self.formatException(record.exc_info))
            line += "\n    " + trace.replace("\n", "\n    ")
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": mask_text(record.getMessage()),
            **{
                k: mask_text(v) if isinstance(v, str) else v
                for k, v in _record_fields(record).items()
            },
        }
        if record.exc_info:
            document["exc"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(document, default=str)


def configure_logging(level: str, log_format: str = "text", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one writing ``log_format`` lines to ``stream``
    (stderr by default)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else KeyValueFormatter())
    handler.addFilter(LogTraceIds())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Libraries whose INFO lines are their own chatter, not our events: Werkzeug's access log,
    # Alembic's plugin and migration steps, pgserver's start/stop command dumps, APScheduler's
    # two lines per producer cycle ("Running job", "executed successfully": most of a day's log),
    # httpx's and httpcore's line per request (an http_get job's request is its attempt's line).
    for noisy in ("werkzeug", "alembic", "pgserver", "apscheduler", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
