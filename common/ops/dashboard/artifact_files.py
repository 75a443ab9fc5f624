"""Artifact files (screenshots, page HTML, tracebacks) served from under artifacts_dir only.

A path stored in a job row is shown as a link only if it resolves inside artifacts_dir; a URL
is resolved again (symlinks and ``..`` included) before anything is read. HTML and text are sent
as text/plain in a sandbox: a scraped page must never run as part of the dashboard.
"""

from __future__ import annotations

from pathlib import Path

from flask import Response, abort, send_file

TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
TEXT_SUFFIXES = {".html", ".htm", ".txt", ".log", ".json"}


def relative_artifact(root: Path, stored: object) -> str | None:
    """The URL part of a stored artifact path, or None when it is not under ``root`` (or not a
    path at all: a job's artifacts are written by its host, and only their shape is checked)."""
    if not stored or not isinstance(stored, str):
        return None
    try:
        resolved = Path(stored).resolve()
        return resolved.relative_to(root.resolve()).as_posix()
    except (OSError, ValueError):
        return None


def send_artifact(root: Path, relative: str) -> Response:
    base = root.resolve()
    try:
        target = (base / relative).resolve()
    except (OSError, ValueError, RuntimeError):
        abort(404)
    if not target.is_relative_to(base) or not target.is_file():
        abort(404)
    suffix = target.suffix.lower()
    if suffix in TYPES:
        response = send_file(target, mimetype=TYPES[suffix], max_age=3600)
    elif suffix in TEXT_SUFFIXES:
        response = send_file(target, mimetype="text/plain; charset=utf-8", max_age=3600)
    else:
        response = send_file(target, mimetype="application/octet-stream", as_attachment=True)
    response.headers["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self'"
    return response
