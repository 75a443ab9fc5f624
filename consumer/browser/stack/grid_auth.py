"""The Grid's basic-auth credentials: new and random at every start of a stack, known to the
consumer and to the Grid's own config file only.

The Grid listens on 127.0.0.1, where any local process can reach it, and so can any page the
browser loads (a ``fetch`` to ``http://127.0.0.1:<port>/session`` from a hostile page, or a
job's http_get if the egress rule allowed loopback). Without a secret, whoever reaches the port
can start browsers, drive other jobs' sessions or end them. With ``[router] username/password``
in the Grid's config, every HTTP request to it needs them; the consumer sends them on every
WebDriver command (Selenium's ``ClientConfig``) and on its readiness probe.

They are never logged or shown: not in the Grid's command line (``/proc/<pid>/cmdline`` is
world-readable) or environment, only in its config file, created 0600 for the user the Grid runs
as; ``repr`` hides the password. Renewed at every start, so a password read from an old stack's
file opens nothing. (The BiDi websocket of a session is not behind them, as Selenium's client
sends no credentials there; reaching it needs the session's random id, which only the
authenticated API gives.)
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

USER_PREFIX = "sf-"


@dataclass(frozen=True)
class GridCredentials:
    username: str
    password: str = field(repr=False)

    @classmethod
    def new(cls) -> GridCredentials:
        # URL-safe base64: nothing a TOML basic string or a Basic header must escape.
        return cls(USER_PREFIX + secrets.token_hex(8), secrets.token_urlsafe(32))

    def router_section(self) -> str:
        """The Grid config's ``[router]`` table that turns basic auth on."""
        return f'[router]\nusername = "{self.username}"\npassword = "{self.password}"\n'

    def authorization(self) -> str:
        """The Authorization header's value."""
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"


def write_private(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    """``text`` in a new file at ``path``, 0600, handed to ``owner`` (uid, gid) when given: a
    file left from an earlier start (perhaps with other permissions) is replaced, never
    rewritten in place."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        if owner is not None:
            os.fchown(handle.fileno(), *owner)
        handle.write(text)
