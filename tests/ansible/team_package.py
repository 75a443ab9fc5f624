"""A team's scraper package as build-wheelhouse.sh would ship it: the wheel of team-hello, one
module whose action ``team_hello`` returns a greeting, found through its scrapefleet.actions
entry point. Written by hand (no build backend needed, a few ms)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

KIND = "team_hello"


def make_wheel(out_dir: Path, version: str, greeting: str) -> Path:
    """A wheel of the package team-hello: one module registering an action, and its
    scrapefleet.actions entry point (written by hand: no build backend needed)."""
    dist = f"team_hello-{version}.dist-info"
    files = {
        "team_hello.py": (
            "from scrapefleet.common.api import register\n\n"
            "@register('team_hello')\n"
            f"def hello(params):\n    return {{'greeting': {greeting!r}}}\n"
        ),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: team-hello\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[scrapefleet.actions]\nteam = team_hello\n",
    }
    record = [
        f"{name},sha256={_digest(text.encode())},{len(text.encode())}"
        for name, text in files.items()
    ]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"team_hello-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
