"""Run the installed console scripts as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.waiting import scaled

BIN = Path(sys.executable).parent
# HTTP jobs may reach the tests' loopback sites (tests/conftest.py sets it for every process).
LOOPBACK_ALLOWED = ("SCRAPEFLEET_HTTP_ALLOW_NETWORKS", "127.0.0.0/8,::1")


def scrubbed_env() -> dict[str, str]:
    """This process's environment without its scrapefleet settings, but for the loopback
    allowance the tests' sites need."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
    env[LOOPBACK_ALLOWED[0]] = LOOPBACK_ALLOWED[1]
    return env


def run_cli(
    args: list[str], database_url: str | None, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = scrubbed_env()
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
