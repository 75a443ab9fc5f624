"""A team's scraper package installed by the roles (scrapefleet_common's install_extras.yml, run
for real by ansible-playbook on this machine): offline from the wheelhouse, by content (a rebuilt
wheel of the same version is installed and restarts the daemons; an unchanged one changes
nothing), its scrapefleet.actions entry point visible in the virtualenv.

The full deployment (test_deploy.py) runs the same tasks on every host of a provisioned fleet;
this one needs no namespace, database or browser, only ansible-playbook."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.ansible.playbook import ANSIBLE_DIR, BIN, PlaybookRun, run_playbook
from tests.ansible.team_package import make_wheel
from tests.waiting import scaled

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]

SYSTEM_PYTHON = Path("/usr/bin/python3")
HANDLER_LOG = "restarts.log"

PLAYBOOK = """
- name: Install a team's packages as the roles do
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Install the extra packages
      ansible.builtin.import_tasks: {tasks}
  handlers:
    - name: Count the daemons' restarts
      ansible.builtin.shell: echo restarted >> {log}
      listen: scrapefleet package changed
      changed_when: true
"""


@pytest.fixture
def target(tmp_path: Path) -> dict[str, Path]:
    if not (BIN / "ansible-playbook").exists() or not SYSTEM_PYTHON.exists():
        pytest.skip("ansible-playbook or /usr/bin/python3 missing: pip install -e '.[test]'")
    paths = {
        "venv": tmp_path / "venv",
        "packages": tmp_path / "packages",
        "control": tmp_path / "control",
        "work": tmp_path / "work",
    }
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(paths["venv"])], check=True)
    (paths["packages"] / "wheelhouse").mkdir(parents=True)  # the package needs nothing more
    paths["work"].mkdir()
    tasks = ANSIBLE_DIR / "roles/scrapefleet_common/tasks/install_extras.yml"
    playbook = paths["work"] / "extras.yml"
    playbook.write_text(PLAYBOOK.format(tasks=tasks, log=paths["work"] / HANDLER_LOG))
    inventory = paths["work"] / "inventory.json"
    local = {"ansible_connection": "local", "ansible_python_interpreter": str(SYSTEM_PYTHON)}
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": local}}}))
    return paths


def _install(target: dict[str, Path], wheels: list[Path]) -> PlaybookRun:
    extra_vars = {
        "scrapefleet_install_venv": str(target["venv"]),
        "scrapefleet_package_dir": str(target["packages"]),
        "scrapefleet_extra_packages": [str(w) for w in wheels],
    }
    run = run_playbook(
        str(target["work"] / "extras.yml"),
        target["work"] / "inventory.json",
        target["work"],
        "-e",
        json.dumps(extra_vars),
        timeout=scaled(200),
    )
    assert run.returncode == 0, run.output[-3000:]
    return run


def _restarts(target: dict[str, Path]) -> int:
    log = target["work"] / HANDLER_LOG
    return len(log.read_text().splitlines()) if log.exists() else 0


def _installed(target: dict[str, Path]) -> tuple[str, list[str], str]:
    """The version pip holds, the entry points a consumer would load, the module's code."""
    code = (
        "import importlib.metadata as m, importlib.util as u, pathlib;"
        "print(m.version('team-hello'));"
        "print(','.join(e.value for e in m.entry_points(group='scrapefleet.actions')));"
        "print(pathlib.Path(u.find_spec('team_hello').origin).read_text())"
    )
    out = subprocess.run(
        [str(target["venv"] / "bin/python"), "-I", "-c", code],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    version, points, source = out.split("\n", 2)
    return version, points.split(","), source


def test_a_team_package_is_installed_by_content_and_restarts_the_daemons(
    target: dict[str, Path],
) -> None:
    first = make_wheel(target["control"] / "v1", "1.0", "hello")
    run = _install(target, [first])
    assert run.recap()["localhost"]["changed"] > 0
    version, points, source = _installed(target)
    assert (version, points) == ("1.0", ["team_hello"]) and "'hello'" in source
    assert _restarts(target) == 1

    again = _install(target, [first])
    assert again.recap()["localhost"]["changed"] == 0, again.changed_tasks()
    assert _restarts(target) == 1

    # Rebuilt, same version, new code: pip alone would keep the old files.
    rebuilt = make_wheel(target["control"] / "v1-rebuilt", "1.0", "bonjour")
    _install(target, [rebuilt])
    assert "'bonjour'" in _installed(target)[2]
    assert _restarts(target) == 2
