"""The playbooks without any host: lint, syntax, and the check of required variables."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.ansible.playbook import ANSIBLE_DIR, BIN, PLAYBOOKS, ansible_env, run_playbook
from tests.waiting import scaled

pytestmark = [pytest.mark.ansible, pytest.mark.usefixtures("ansible_tools")]


@pytest.mark.timeout(320)  # ansible-lint loads every file: ~40 s idle, more when loaded
def test_ansible_lint_is_clean(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--nocolor"],  # settings: ansible/.ansible-lint
        cwd=ANSIBLE_DIR,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str, tmp_path: Path) -> None:
    run = run_playbook(playbook, ANSIBLE_DIR / "inventory.example.yml", tmp_path, "--syntax-check")
    assert run.returncode == 0, run.output


def test_missing_required_variable_stops_the_play_naming_it(tmp_path: Path) -> None:
    # The hosts are never contacted: the check runs on the controller before any connection.
    host = {"ansible_host": "127.0.0.1", "ansible_port": 9}
    inventory = {
        "all": {
            "vars": {"scrapefleet_package": "scrapefleet"},  # no scrapefleet_db_password
            "children": {
                "database": {"hosts": {"db": host}},
                "producer": {"hosts": {"db": None}},
                "consumers": {"hosts": {"c1": host}},
            },
        }
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=tmp_path, delete=False) as handle:
        json.dump(inventory, handle)
    run = run_playbook("site.yml", Path(handle.name), tmp_path, timeout=100)
    assert run.returncode != 0
    assert "required variable scrapefleet_db_password is not set" in run.output
    assert "TASK [database" not in run.output  # stopped before the first role
    assert all(counts["changed"] == 0 for counts in run.recap().values()), run.output


def _runs_or_installs(task: dict[str, object]) -> str:
    """What a task runs (command/shell) or installs (apt), as one string; "" for other tasks."""
    parts = []
    for module in ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.apt"):
        args = task.get(module)
        parts.append(json.dumps(args) if args is not None else "")
    return " ".join(parts)


def test_no_task_runs_npm_on_a_host() -> None:
    """Hosts get the Selenium jar from the control node (build-wheelhouse.sh): no role runs npm
    or installs it, so no host needs the npm registry."""
    import yaml

    found = [
        f"{tasks.relative_to(ANSIBLE_DIR)}: {task.get('name')}"
        for tasks in sorted(ANSIBLE_DIR.glob("roles/*/tasks/*.yml"))
        for task in yaml.safe_load(tasks.read_text()) or []
        if re.search(r"\bnpm\b", _runs_or_installs(task))
    ]
    assert not found


def test_group_vars_lists_every_default_of_every_role() -> None:
    """group_vars/all.yml says it lists every variable of the roles: each key of a role's
    defaults appears there (as `# name:`), so a new one cannot be left out silently."""
    import yaml

    listed = set(
        re.findall(
            r"^#?\s*(scrapefleet_\w+):", (ANSIBLE_DIR / "group_vars/all.yml").read_text(), re.M
        )
    )
    missing = sorted(
        f"{defaults.relative_to(ANSIBLE_DIR)}: {name}"
        for defaults in ANSIBLE_DIR.glob("roles/*/defaults/main.yml")
        for name in yaml.safe_load(defaults.read_text()) or {}
        if name not in listed
    )
    assert not missing
