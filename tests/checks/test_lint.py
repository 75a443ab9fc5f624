"""ruff and mypy are part of the test command: style and types are checked on every run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "argv",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_is_clean(argv: list[str]) -> None:
    done = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)} found problems:\n{done.stdout}{done.stderr}"


def test_the_limits_stay_configured() -> None:
    """The checks above hold the code to these limits only while pyproject sets them."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    assert "C90" in config["ruff"]["lint"]["select"]
    assert config["ruff"]["lint"]["mccabe"]["max-complexity"] == 15
    assert config["mypy"]["disallow_untyped_defs"] is True
    assert config["mypy"]["strict_equality"] is True
