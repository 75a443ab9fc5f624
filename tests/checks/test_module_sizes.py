"""Modules a newcomer can read in one sitting: none of the package's modules (or tools') is over
MAX_MODULE_LINES lines. The aim is ~400; the limit leaves room for a docstring that says why,
not for a second job (a module that needs more is two rooms: see
docs/explanation/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("common", "consumer", "producer", "tools")
MAX_MODULE_LINES = 450


def module_sizes(root: Path) -> dict[str, int]:
    sizes = {}
    for room in ROOMS:
        for module in sorted((root / room).rglob("*.py")) if (root / room).is_dir() else ():
            sizes[str(module.relative_to(root))] = len(module.read_text().splitlines())
    return sizes


def over_limit(sizes: dict[str, int], limit: int) -> list[str]:
    return [f"{path}: {lines} lines" for path, lines in sorted(sizes.items()) if lines > limit]


def test_no_module_is_over_the_limit() -> None:
    sizes = module_sizes(ROOT)
    assert len(sizes) > 100  # the rooms were found: an empty walk proves nothing
    # ...and the packages inside them: a module two folders down is measured too.
    assert "consumer/browser/supervisor/stack_supervisor.py" in sizes
    assert "common/store/consuming/attempts.py" in sizes
    assert over_limit(sizes, MAX_MODULE_LINES) == []


def test_the_check_names_a_module_over_the_limit(tmp_path: Path) -> None:
    package = tmp_path / "consumer" / "browser" / "stack"
    package.mkdir(parents=True)
    (package / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "small.py").write_text("x = 1\n")
    (tmp_path / "consumer" / "flat.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 2))
    assert over_limit(module_sizes(tmp_path), MAX_MODULE_LINES) == [
        f"consumer/browser/stack/big.py: {MAX_MODULE_LINES + 1} lines",
        f"consumer/flat.py: {MAX_MODULE_LINES + 2} lines",
    ]


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_exists(room: str) -> None:
    assert (ROOT / room).is_dir()
