"""A profile job's browser: a session of its own on ``<profiles_dir>/<name>``.

A user-data-dir can only be given to a new browser, so a profile job never runs in a warm
session's user context; it leases a slot of the pool like an ``isolation="session"`` job
(the host's session cap holds) and its browser is quit after it. Cookies with an expiry,
localStorage and the logins they carry are on disk for the profile's next job (session cookies
end with the browser, as in any Chromium). A job's proxy (its own or the host's) is given to
the whole browser (``--proxy-server``), not to a user context of its own, which would not be
the profile's.

Chromium locks a user-data-dir with ``SingletonLock`` (a symlink naming host and pid),
``SingletonSocket`` and ``SingletonCookie``. One profile runs one job at a time (the producer's
guarantee), but the last job's browser may still be exiting when the next job starts (its
processes linger ~1.5 s after quit), and a killed one (a hung job's, a crashed host's) leaves
the lock behind, which would send the next browser to a process that is gone. So before each
session: wait, bounded, for every process whose command line names the directory to exit,
then remove the Singleton files. A directory still in use after the wait is the host's
problem, not the job's: StackError, the job is released and tried again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psutil

from scrapefleet.common.actions.registry import get_action
from scrapefleet.common.browser.isolation import Isolation
from scrapefleet.common.browser.profile_names import validate_profile_name
from scrapefleet.common.constants import PROFILE_DIR_FREE_WAIT_S
from scrapefleet.common.errors import ScrapefleetError, StackError
from scrapefleet.common.store import ClaimedJob
from scrapefleet.consumer.browser.actions.job_setup import host_defaults
from scrapefleet.consumer.browser.agent.agent_client import agent_profile_dir, uses_agent
from scrapefleet.consumer.browser.sessions.session_operations import BrowserLaunch
from scrapefleet.consumer.browser.stack.run_as import BrowserUser, resolve_browser_user

log = logging.getLogger(__name__)

SINGLETON_FILES = ("SingletonLock", "SingletonSocket", "SingletonCookie")
_POLL_S = 0.1

# (isolation, launch=...) -> the job's driver (the stack supervisor's lease for a job)
ProfileCapableLease = Callable[..., AbstractContextManager[Any]]


def profiles_root(settings: Any) -> Path:
    """The ``profiles_dir`` setting, or ``<state_dir>/profiles`` when unset."""
    return Path(settings.profiles_dir or Path(settings.state_dir) / "profiles")


def profile_dir(root: Path, name: str) -> Path:
    """The profile's directory under ``root``; a name that could leave it is refused (the
    names were checked at submit: this is the last guard before a path is made)."""
    try:
        validate_profile_name(name)
    except ValueError as exc:
        raise StackError(f"profile: {exc}") from None
    return root / name


def processes_using(directory: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``directory`` as their user-data-dir (a
    browser and its helpers); never this process."""
    exact, inside = f"--user-data-dir={directory}", f"{directory}{os.sep}"
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(arg == exact or inside in arg for arg in proc.cmdline()):
                found.append(proc)
    return found


def ready_profile_dir(
    directory: Path,
    wait_s: float = PROFILE_DIR_FREE_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    owner: BrowserUser | None = None,
) -> Path:
    """Make ``directory`` ready for a new browser: created (private to the browser's user,
    ``owner`` when it is another than ours), no browser left on it (waited for up to
    ``wait_s``), no stale Singleton lock. StackError if a browser still holds it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owner is not None and owner.switches:
        give_to(directory, owner)
    deadline = clock() + wait_s
    while users := processes_using(directory):
        if clock() >= deadline:
            raise StackError(
                f"profile directory {directory} still in use by pid"
                f" {', '.join(str(p.pid) for p in users[:5])} after {wait_s:.0f} s"
            )
        time.sleep(_POLL_S)
    for name in SINGLETON_FILES:
        stale = directory / name
        if stale.is_symlink() or stale.exists():
            log.info("profile %s: removing %s left by a browser that ended", directory.name, name)
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return directory


def give_to(directory: Path, owner: BrowserUser) -> None:
    """``directory`` and what it holds owned by ``owner`` (the browser writes its profile
    there; a 0700 directory of the consumer's is one it cannot even open). Walked only when the
    directory is not already the owner's: a profile made before, by the consumer's user."""
    if directory.stat().st_uid == owner.uid:
        return
    for folder, subfolders, files in os.walk(directory):
        os.chown(folder, owner.uid, owner.gid)
        for name in (*subfolders, *files):
            os.chown(Path(folder) / name, owner.uid, owner.gid, follow_symlinks=False)


def profile_lease(
    lease: ProfileCapableLease,
    root: Path,
    name: str,
    proxy: str | None = None,
    browser_user: str | None = None,
    agent_socket: Path | None = None,
) -> Callable[[Isolation], AbstractContextManager[Any]]:
    """A runner's lease (consumer.runner.DriverLease) giving the job a browser of its own on
    profile ``name``'s directory under ``root`` (through ``proxy``, the job's effective one,
    for the whole browser), whatever isolation it asks for. Every failure is raised when the
    lease is entered: the runner releases the job. With the browser agent (``agent_socket``),
    the directory is the agent's, under its own directory, and made ready by it."""

    @contextlib.contextmanager
    def leased(_isolation: Isolation) -> Iterator[Any]:
        if uses_agent(agent_socket, browser_user):
            directory = agent_profile_dir(agent_socket, name)  # type: ignore[arg-type]
        else:
            owner = resolve_browser_user(browser_user)  # the stack's user: its browser writes
            directory = ready_profile_dir(profile_dir(root, name), owner=owner)
        with lease("session", launch=BrowserLaunch(directory, proxy)) as driver:
            yield driver

    return leased


def job_proxy(job: ClaimedJob, settings: Any) -> str | None:
    """The proxy a browser job's pages go through: its own option, else the host's default;
    None when it names none, or its options do not validate (its run fails it, saying why)."""
    try:
        action = get_action(job.kind)
        options = action.browser_options_of(job.payload).over(host_defaults(settings))
    except (ScrapefleetError, ValueError):
        return None
    return options.proxy
