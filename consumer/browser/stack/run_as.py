"""Who the browser runs as, and whether Chromium's sandbox is on: decided once per stack.

A consumer host loads hostile pages, so the browser gets as little as possible:

- ``browser_user``: Xvfb and the Grid (so chromedriver and every Chromium process) run as
  this user, which cannot read the consumer's settings (its database credentials) or write the
  consumer user's ``~/.ssh``. Switching users needs root or CAP_SETUID and CAP_SETGID; ending
  the stack and reading its memory (PSS) need CAP_KILL and CAP_SYS_PTRACE.
- ``stack_environment``: every process of the stack starts with this explicit environment and
  nothing else of the consumer's (its database URL, proxy credentials, whatever its unit or
  shell set): a process's environment is readable in ``/proc/<pid>/environ`` by its own user.
- ``chromium_sandbox``: on unless the browser runs as root, where Chromium refuses to start
  sandboxed (its namespace sandbox needs an unprivileged user). ``false`` turns it off
  explicitly; ``true`` with the browser running as root is refused with the reason.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

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


# The stack's programs are named by absolute paths (settings); PATH is for what they run.
STACK_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
_LOCALE_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def stack_environment(home: Path, tmp_dir: Path, **more: str) -> dict[str, str]:
    """The whole environment of a stack process: PATH, LANG (the consumer's when it names a
    locale), HOME and TMPDIR of the stack's own, and ``more`` (DISPLAY, the stack's markers).
    Built from nothing, never from ``os.environ``: nothing of the consumer's leaks by default."""
    lang = os.environ.get("LANG", "")
    return {
        "PATH": STACK_PATH,
        "LANG": lang if _LOCALE_NAME.fullmatch(lang) else DEFAULT_LANG,
        "HOME": str(home),
        "TMPDIR": str(tmp_dir),
        **more,
    }


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
