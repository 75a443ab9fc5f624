"""Who the browser runs as, and whether Chromium's sandbox is on: decided once per stack.

A consumer host loads hostile pages, so the browser gets as little as possible:

- ``browser_user``: Xvfb and the Grid (so chromedriver and every Chromium process) run as
  this user, which cannot read the consumer's settings (its database credentials) or write the
  consumer user's ``~/.ssh``. Switching users needs root or CAP_SETUID and CAP_SETGID; ending
  the stack and reading its memory (PSS) need CAP_KILL and CAP_SYS_PTRACE.
- ``chromium_sandbox``: on unless the browser runs as root, where Chromium refuses to start
  sandboxed (its namespace sandbox needs an unprivileged user). ``false`` turns it off
  explicitly; ``true`` with the browser running as root is refused with the reason.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from scrapefleet.common.errors import StackError


@dataclass(frozen=True)
class BrowserUser:
    uid: int
    gid: int
    name: str | None  # None: the consumer's own user

    @property
    def switches(self) -> bool:
        return self.name is not None and self.uid != os.geteuid()


def resolve_browser_user(name: str | None) -> BrowserUser:
    """The account ``name`` (the consumer's own when None); StackError if it does not exist."""
    if name is None:
        return BrowserUser(os.geteuid(), os.getegid(), None)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise StackError(f"browser_user {name!r}: no such user on this host") from None
    return BrowserUser(entry.pw_uid, entry.pw_gid, name)


def needs_no_sandbox(sandbox: bool | None, browser_uid: int) -> bool:
    """Must Chromium be started with --no-sandbox? Raises StackError for a sandbox asked for
    where Chromium cannot have one."""
    as_root = browser_uid == 0
    if sandbox is None:
        return as_root
    if sandbox and as_root:
        raise StackError(
            "chromium_sandbox = true, but the browser would run as root, where Chromium"
            " refuses its sandbox: set browser_user to an unprivileged account"
        )
    return not sandbox
