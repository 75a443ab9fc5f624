"""systemd's notify protocol, for ``Type=notify`` units with ``WatchdogSec=``.

A daemon under such a unit says READY=1 once it works, WATCHDOG=1 at least every
``WatchdogSec`` (or systemd kills and restarts it: a hung cycle is caught), and STOPPING=1 when
it begins to stop. systemd passes the socket in ``NOTIFY_SOCKET`` (a path, or an abstract
socket when it starts with "@"). Without it (a terminal, a test, another supervisor) every call
does nothing. Never raises: losing a notification must not stop the daemon.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        self._address = address if address is not None else os.environ.get(NOTIFY_SOCKET_ENV)
        self._ready = False
        self._warned = False

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def ready(self) -> None:
        """READY=1, once."""
        if not self._ready:
            self._ready = self._send("READY=1")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def stopping(self) -> None:
        self._send("STOPPING=1")

    def _send(self, message: str) -> bool:
        if not self._address:
            return False
        target = "\0" + self._address[1:] if self._address.startswith("@") else self._address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall(message.encode())
            return True
        except OSError as exc:
            if not self._warned:  # once: a unit without NotifyAccess would repeat it forever
                log.warning("cannot notify systemd at %s: %s", self._address, exc)
                self._warned = True
            return False
