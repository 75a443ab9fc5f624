"""The browser agent's protocol: one JSON object on one line each way, over a unix socket.

A request names a ``verb`` and that verb's fields, nothing else: every field is checked here
against its kind and bounds (a stack's name, a display number, a port, the Grid's credentials),
an unknown verb or field is refused by name, and a request longer than MAX_REQUEST_BYTES is
refused before it is parsed. No field is a path to run, an argument list or an environment: the
agent builds every command line itself (consumer.browser.stack.process_control).

The answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": "<one line>"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from scrapefleet.common.browser.profile_names import PROFILE_NAME

MAX_REQUEST_BYTES = 4096
MAX_ANSWER_BYTES = 65536  # a log tail and a few hundred PIDs
MAX_PIDS = 256

# A stack's name: its work directory's last components on the consumer's side (host, slot).
_STACK_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOKEN = re.compile(r"[0-9a-f]{32}")
_GRID_USER = re.compile(r"sf-[0-9a-f]{16}")
_GRID_PASSWORD = re.compile(r"[A-Za-z0-9_-]{32,64}")


class ProtocolError(ValueError):
    """A request outside the protocol; its message is the answer's error line."""


def _stack(value: Any) -> str:
    parts = value.split("/") if isinstance(value, str) else []
    if not 1 <= len(parts) <= 3 or not all(_STACK_PART.fullmatch(p) for p in parts):
        raise ProtocolError("must be 1 to 3 names of [A-Za-z0-9_.-] joined by /")
    return str(value)


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ProtocolError(f"must be {what}")
        return value

    return check


def _integer(low: int, high: int, optional: bool = False) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ProtocolError(f"must be an integer from {low} to {high}")
        return value

    return check


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 120:
        raise ProtocolError("must be a number of seconds above 0, at most 120")
    return float(value)


def _pids(value: Any) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_PIDS:
        raise ProtocolError(f"must be a list of at most {MAX_PIDS} PIDs")
    return [_integer(1, 2**22)(pid) or 0 for pid in value]


def _path_text(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 512:
        raise ProtocolError("must be an absolute path of at most 512 characters")
    return value


_STACK = {"stack": _stack, "token": _matching(_TOKEN, "32 lowercase hex digits")}
VERBS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "hello": {},
    "prepare": _STACK,
    # Kept open by the client while the stack runs: its end without a stop ends the stack.
    "hold": _STACK,
    "start_xvfb": {
        **_STACK,
        "display": _integer(0, 9999, optional=True),
        "width": _integer(320, 7680),
        "height": _integer(240, 4320),
    },
    "start_grid": {
        **_STACK,
        "host": _stack,
        "port": _integer(1024, 65535),
        "capacity": _integer(1, 256),
        "session_timeout_s": _integer(10, 86400),
        "request_timeout_s": _integer(1, 86400),
        "username": _matching(_GRID_USER, "sf- and 16 hex digits"),
        "password": _matching(_GRID_PASSWORD, "32 to 64 URL-safe base64 characters"),
        "driver": _matching(re.compile(r"grid|chromedriver"), "grid or chromedriver"),
    },
    "running": _STACK,
    "end_grid": _STACK,
    "grid_failed": _STACK,
    "log_tail": _STACK,
    "stop": _STACK,
    "processes": _STACK,
    "pss": _STACK,
    "end_browser": {**_STACK, "profile_dir": _path_text, "timeout_s": _seconds},
    "await_exit": {**_STACK, "pids": _pids, "timeout_s": _seconds},
    "profile_ready": {"name": _matching(PROFILE_NAME, "a profile name")},
}


def parse_request(line: bytes) -> tuple[str, dict[str, Any]]:
    """The verb and its checked fields; ProtocolError naming what is wrong."""
    if len(line) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("request is not one JSON object") from None
    if not isinstance(request, dict):
        raise ProtocolError("request is not one JSON object")
    verb = request.pop("verb", None)
    if not isinstance(verb, str) or verb not in VERBS:
        raise ProtocolError(f"unknown verb {str(verb)[:40]!r}")
    fields = VERBS[verb]
    unknown = sorted(set(request) - set(fields))
    if unknown:
        raise ProtocolError(f"{verb}: unknown field {unknown[0][:40]!r}")
    missing = sorted(set(fields) - set(request))
    if missing:
        raise ProtocolError(f"{verb}: missing field {missing[0]!r}")
    checked = {}
    for name, check in fields.items():
        try:
            checked[name] = check(request[name])
        except ProtocolError as exc:
            raise ProtocolError(f"{verb}: {name} {exc}") from None
    return verb, checked


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"
