"""The README's configuration table is the settings' reference: every setting is in it, and
nothing that is not a setting."""

from __future__ import annotations

import re
from pathlib import Path

from scrapefleet.common.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def _documented() -> list[str]:
    text = README.read_text()
    table = text.split("| setting (env `SCRAPEFLEET_…`) | default | meaning |", 1)[1]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        match = re.match(r"\| `([a-z0-9_]+)` \|", line)
        assert match, f"a row of the settings table that names no setting: {line}"
        rows.append(match[1])
    return rows


def test_every_setting_is_documented_once_and_nothing_else() -> None:
    documented = _documented()
    assert len(documented) == len(set(documented)), "a setting documented twice"
    fields = set(Settings.model_fields)
    assert fields - set(documented) == set(), "settings missing from the README's table"
    assert set(documented) - fields == set(), "README documents settings that do not exist"
