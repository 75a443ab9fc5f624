"""A display whose leftover lock cannot be removed (another user's, in sticky /tmp) is one the
stack skips, not an error that escapes its start."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapefleet.consumer.browser.stack import host_needs as browser_stack


def test_a_lock_that_cannot_be_removed_means_try_another_display(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / ".X99-lock"
    lock.write_text("999999999\n")  # no such process: the server that held it is dead
    monkeypatch.setattr(browser_stack, "x_lock", lambda display: lock)
    monkeypatch.setattr(browser_stack, "x_socket", lambda display: tmp_path / f"X{display}")

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Operation not permitted", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    assert browser_stack.clear_stale_display(99) is False
    monkeypatch.undo()
    assert lock.exists()


def test_a_dead_servers_lock_is_cleared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / ".X99-lock"
    lock.write_text("999999999\n")
    monkeypatch.setattr(browser_stack, "x_lock", lambda display: lock)
    monkeypatch.setattr(browser_stack, "x_socket", lambda display: tmp_path / f"X{display}")
    assert browser_stack.clear_stale_display(99) is True and not lock.exists()
