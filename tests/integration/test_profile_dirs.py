"""A profile's directory before its browser starts, with real processes: a browser still on it
is waited for (and the job released when it outlasts the wait), a dead one's locks removed,
and a name that could leave the profiles directory is refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.sessions.profile_sessions import profile_dir, ready_profile_dir
from scrapefleet.consumer.browser.stack.run_as import resolve_browser_user
from tests.waiting import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line names the profile directory, as a browser's does."""
    directory = tmp_path / "acct-7"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--user-data-dir={directory}"]
    )
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_a_browser_still_on_the_directory_is_waited_for_then_refused(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    directory = tmp_path / "acct-7"
    with pytest.raises(StackError, match=f"still in use by pid {holder.pid}"):
        ready_profile_dir(directory, wait_s=0.3)
    holder.kill()
    holder.wait(timeout=scaled(10))
    assert ready_profile_dir(directory, wait_s=scaled(5)) == directory


def test_a_directory_of_a_similar_name_is_not_in_use(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    # acct-7 is held; acct-70 and acct-7x are other profiles
    for name in ("acct-70", "acct-7x"):
        assert ready_profile_dir(tmp_path / name, wait_s=0.1).is_dir()


def test_the_locks_of_a_browser_that_died_are_removed_and_the_data_kept(tmp_path: Path) -> None:
    directory = tmp_path / "acct-7"
    (directory / "Default").mkdir(parents=True)
    (directory / "Default" / "Cookies").write_text("kept")
    (directory / "SingletonLock").symlink_to("elsewhere-4242")
    (directory / "SingletonSocket").symlink_to("/tmp/gone/SingletonSocket")
    (directory / "SingletonCookie").symlink_to("77")

    ready_profile_dir(directory, wait_s=0.1)

    assert sorted(p.name for p in directory.iterdir()) == ["Default"]
    assert (directory / "Default" / "Cookies").read_text() == "kept"


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", ""])
def test_a_name_that_could_leave_the_profiles_directory_is_refused(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(StackError, match="is not a profile name"):
        profile_dir(tmp_path, name)


def test_a_profile_directory_belongs_to_the_browsers_user(tmp_path: Path) -> None:
    """The browser runs as ``browser_user``: a directory private to the consumer's user is one
    it cannot open. A new one is made its own; one made earlier by the consumer is given to it,
    contents included (a link is changed itself, never what it points at)."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (as CI runs the tests)")
    nobody = resolve_browser_user("nobody")
    fresh = ready_profile_dir(tmp_path / "fresh", wait_s=0.1, owner=nobody)
    earlier = tmp_path / "earlier"
    (earlier / "Default").mkdir(parents=True, mode=0o700)
    (earlier / "Default" / "Cookies").write_text("kept")
    outside = tmp_path / "outside"
    outside.write_text("not the profile's")
    (earlier / "link").symlink_to(outside)
    ready_profile_dir(earlier, wait_s=0.1, owner=nobody)
    for path in (fresh, earlier, earlier / "Default", earlier / "Default" / "Cookies"):
        assert path.stat().st_uid == nobody.uid, path
    assert (earlier / "link").lstat().st_uid == nobody.uid
    assert outside.stat().st_uid == 0 and stat.S_IMODE(fresh.stat().st_mode) == 0o700
