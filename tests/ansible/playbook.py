"""Running ansible-playbook from the tests and reading its PLAY RECAP."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.waiting import scaled

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = REPO / ".venv" / "bin"
PLAYBOOKS = ["site.yml", "add-consumer.yml", "remove-consumer.yml", "rollout.yml", "verify.yml"]
RECAP_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


@dataclass
class PlaybookRun:
    returncode: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        """host -> {"ok": n, "changed": n, "unreachable": n, "failed": n, ...}."""
        text = self.output.split("PLAY RECAP", 1)[-1]
        hosts: dict[str, dict[str, int]] = {}
        for line in text.splitlines():
            if match := RECAP_LINE.match(line.strip()):
                counts = dict(pair.split("=") for pair in match["counts"].split())
                hosts[match["host"]] = {key: int(value) for key, value in counts.items()}
        return hosts

    def changed_tasks(self) -> list[str]:
        """The 'changed: [host]' lines with their task headers, to explain a failure."""
        task, found = "", []
        for line in self.output.splitlines():
            if line.startswith("TASK ["):
                task = line
            elif line.startswith("changed:"):
                found.append(f"{task} {line}")
        return found


def ansible_env(work_dir: Path) -> dict[str, str]:
    """Ansible's own files (control sockets, temp files) go under work_dir, removed afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SCRAPEFLEET_"))}
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_HOME=str(work_dir / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(work_dir / "ansible-tmp"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(work_dir / "cp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    return env


def run_playbook(
    playbook: str,
    inventory: Path,
    work_dir: Path,
    *extra: str,
    timeout: float = 600.0,  # generous: a loaded 2-core machine runs site.yml slowly
) -> PlaybookRun:
    try:
        result = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
            cwd=ANSIBLE_DIR,  # ./ansible.cfg
            env=ansible_env(work_dir),
            capture_output=True,
            text=True,
            timeout=scaled(timeout),
        )
    except subprocess.TimeoutExpired as timed_out:
        # What it did until then is what explains the failure: the caller's assertion shows it.
        output = [_text(timed_out.stdout), _text(timed_out.stderr)]
        return PlaybookRun(-9, "".join(output) + f"\n[timed out after {scaled(timeout)} s]\n")
    return PlaybookRun(result.returncode, result.stdout + result.stderr)


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""
