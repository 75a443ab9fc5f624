"""A user's code is typed against `import scrapefleet`: mypy follows the package's lazy names
(the fast tier's tests/unit/test_public_api.py checks what they are at run time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def test_a_users_code_is_typed_against_the_top_level_package(tmp_path: Path) -> None:
    user = tmp_path / "prices.py"
    user.write_text(
        "from typing import Any\n"
        "from pydantic import BaseModel\n"
        "from scrapefleet import Client, Permanent, register, submit\n\n"
        "class Params(BaseModel):\n"
        "    url: str\n\n"
        "@register('prices', Params)\n"
        "def prices(params: Params) -> dict[str, Any]:\n"
        "    raise Permanent('gone')\n\n"
        "job: int | None = submit('prices', {'url': 'https://example.org/'})\n"
        "wrong: str = submit('prices')\n"
        "Client().nothing\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(user)],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=tmp_path,
    )
    errors = [line.split(": error: ")[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 2, out.stdout  # the two mistakes, nothing else (no import-not-found)
    assert errors[0].startswith("Incompatible types in assignment"), errors
    assert errors[1].startswith('"Client" has no attribute "nothing"'), errors
