"""Folders a newcomer can take in at a glance: no folder of product code holds more than
MAX_FOLDER_MODULES modules (``__init__.py`` aside). The aim is ~15; past 20 a folder is split
into packages by concern, as consumer/browser/ (stack, supervisor, sessions, actions, agent) and
producer/ (probes, assigning, webhooks, background) are: see docs/explanation/architecture.md.

The migrations' revisions (migrations/versions/) are a numbered chain, not a room, and are not
counted."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("api", "common", "consumer", "producer")
MAX_FOLDER_MODULES = 20


def folder_sizes(root: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for top in ROOTS:
        if not (root / top).is_dir():
            continue
        for folder in [root / top, *(p for p in (root / top).rglob("*") if p.is_dir())]:
            if "__pycache__" in folder.parts:
                continue
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if modules:
                sizes[folder.relative_to(root).as_posix()] = len(modules)
    return sizes


def crowded(sizes: dict[str, int], limit: int) -> list[str]:
    return [f"{folder}: {n} modules" for folder, n in sorted(sizes.items()) if n > limit]


def test_no_folder_holds_more_than_the_limit() -> None:
    sizes = folder_sizes(ROOT)
    # The walk found the packages, nested ones too: an empty walk proves nothing.
    assert len(sizes) > 20
    assert "consumer/browser/supervisor" in sizes
    assert "common/store/consuming" in sizes
    assert crowded(sizes, MAX_FOLDER_MODULES) == []


def test_the_check_names_a_crowded_folder(tmp_path: Path) -> None:
    browser = tmp_path / "consumer" / "browser"
    browser.mkdir(parents=True)
    for n in range(MAX_FOLDER_MODULES + 1):
        (browser / f"m{n}.py").write_text("x = 1\n")
    (browser / "__init__.py").write_text("")
    producer = tmp_path / "producer"
    producer.mkdir()
    for n in range(MAX_FOLDER_MODULES - 1):
        (producer / f"p{n}.py").write_text("x = 1\n")
    # __init__.py is not a module of the folder: 19 + 1 stays within the limit.
    (producer / "__init__.py").write_text("")
    (producer / "extra.py").write_text("x = 1\n")
    sizes = folder_sizes(tmp_path)
    assert sizes == {"consumer/browser": MAX_FOLDER_MODULES + 1, "producer": MAX_FOLDER_MODULES}
    assert crowded(sizes, MAX_FOLDER_MODULES) == [
        f"consumer/browser: {MAX_FOLDER_MODULES + 1} modules"
    ]


def test_the_browser_and_the_producer_are_split_by_concern() -> None:
    # consumer/browser/ itself holds no module: each lives in the package of its concern.
    assert folder_sizes(ROOT).get("consumer/browser", 0) == 0
    for package in ("stack", "supervisor", "sessions", "actions", "agent"):
        assert (ROOT / "consumer" / "browser" / package / "__init__.py").is_file()
    for package in ("probes", "assigning", "webhooks", "background"):
        assert (ROOT / "producer" / package / "__init__.py").is_file()
