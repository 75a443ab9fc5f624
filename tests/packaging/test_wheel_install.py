"""The built wheel installs as one namespace: beside a distribution that ships its own top-level
`common` package, `scrapefleet --help` and the demo still work, and neither package shadows the
other. Offline: dependencies come from build/wheelhouse (made by .ci/install-ansible.sh)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.in_tree_build import one_build_at_a_time
from tests.waiting import scaled

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / "build" / "wheelhouse"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel_with_top_level_common(out_dir: Path) -> Path:
    """A distribution of someone else's, the kind that used to replace our `common`."""
    files = {
        "common/__init__.py": b"OWNER = 'othercommon'\n",
        "common/settings.py": b"class Other:\n    pass\n",
        "othercommon-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: othercommon\n"
        b"Version: 1.0\n",
        "othercommon-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: scrapefleet-test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(name, data) for name, data in files.items()]
    record.append("othercommon-1.0.dist-info/RECORD,,")
    path = out_dir / "othercommon-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("othercommon-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _run(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPEFLEET_", "PYTHON"))}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(timeout_s)
    )


def test_wheel_installs_beside_a_distribution_with_a_top_level_common(tmp_path: Path) -> None:
    if not WHEELHOUSE.is_dir():
        pytest.skip(f"{WHEELHOUSE} is missing: run .ci/install-ansible.sh (it builds the wheels)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with one_build_at_a_time():
        built = _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
             "--find-links", str(WHEELHOUSE), "--wheel-dir", str(wheels), str(REPO)],
            cwd=tmp_path, timeout_s=180,
        )  # fmt: skip
    assert built.returncode == 0, built.stderr
    ours = next(wheels.glob("scrapefleet-*.whl"))
    theirs = make_wheel_with_top_level_common(wheels)

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120).returncode == 0
    python = venv / "bin" / "python"
    # Theirs after ours: the order in which the old layout lost its files. [demo]: the demo
    # below needs the embedded PostgreSQL.
    for wheel in (f"{ours}[demo]", str(theirs)):
        installed = _run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-index",
             "--find-links", str(WHEELHOUSE), wheel],
            cwd=tmp_path, timeout_s=300,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr

    both = _run(
        [str(python), "-c", "import common, scrapefleet.common.settings as s;"
         " print(common.OWNER, s.Settings.__name__)"],
        cwd=tmp_path, timeout_s=60,
    )  # fmt: skip
    assert both.stdout.split() == ["othercommon", "Settings"], both.stdout + both.stderr

    # The top-level package is the public API, typed (its py.typed marker ships).
    public = _run(
        [str(python), "-c", "import pathlib, scrapefleet; from scrapefleet import Client, register,"
         " submit; print(submit.__module__, (pathlib.Path(scrapefleet.__file__).parent"
         " / 'py.typed').is_file())"],
        cwd=tmp_path, timeout_s=60,
    )  # fmt: skip
    assert public.stdout.split() == ["scrapefleet.common.api", "True"], public.stderr

    helped = _run([str(venv / "bin" / "scrapefleet"), "--help"], tmp_path, 60)
    assert helped.returncode == 0 and "Usage: scrapefleet" in helped.stdout, helped.stderr

    demo = _run([str(venv / "bin" / "scrapefleet"), "demo", "--jobs", "30"], tmp_path, 300)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "30 of 30 jobs finished" in demo.stdout, demo.stdout[-2000:]
