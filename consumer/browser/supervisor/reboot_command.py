"""The host's reboot command run, as the stack supervisor's RunRebootCommand action asks.

Apart from consumer.browser.supervisor.stack_supervisor because it is the one place scrapefleet runs
a command that takes the machine down, and a test replaces it (``RebootRunner``) with a fake.
The Ansible role sets the command to a request file that a root-owned systemd path unit acts
on; a consumer started by hand has none and never reboots (consumer.browser.supervisor.states).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable

REBOOT_COMMAND_TIMEOUT_S = 120.0

RebootRunner = Callable[[str], "str | None"]  # the command -> None once it ran, else why not


def run_reboot_command(command: str) -> str | None:
    """Run the configured reboot command; None when it exited 0, else why it did not."""
    try:
        argv = shlex.split(command)
        if not argv:
            return "the reboot command is empty"
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=REBOOT_COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return f"reboot command {command!r} could not run: {exc}"
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()[-300:]
        return f"reboot command {command!r} exited {done.returncode}: {stderr}"
    return None
