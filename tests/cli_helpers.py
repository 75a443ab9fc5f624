"""Run the installed console scripts as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.waiting import scaled

BIN = Path(sys.executable).parent


def run_cli(
    args: list[str], database_url: str | None, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    if database_url:
        full_env["SCRAPEFLEET_DATABASE_URL"] = database_url
    full_env.update(env)
    return subprocess.run(
        [str(BIN / "scrapefleet"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=scaled(120),
        check=False,
    )
