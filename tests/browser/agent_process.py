"""A real browser agent process (consumer.browser.agent.browser_agent) for a test, as a given user.

The agent runs as the browser's user, who cannot run this checkout's virtualenv Python when it
lives under /root (0700): then the machine's own Python of the same version is used, with the
virtualenv's site-packages added (same ABI, so the compiled wheels load).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import site
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.waiting import scaled, wait_for

AGENT_MODULE = "scrapefleet.consumer.browser.agent.browser_agent"
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


def _launcher(python: str) -> list[str]:
    paths = [p for p in site.getsitepackages() if Path(p).is_dir()]
    code = (
        "import site, sys\n"
        f"for p in {paths!r}: site.addsitedir(p)\n"
        f"from {AGENT_MODULE} import main\n"
        "main(sys.argv[1:])\n"
    )
    return [python, "-I", "-c", code]


def _as(user: str) -> dict[str, object]:
    if user == pwd.getpwuid(os.geteuid()).pw_name:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def agent_python(user: str) -> list[str] | None:
    """A command that starts the agent's main as ``user``, or None when none can."""
    for python in (sys.executable, str(SYSTEM_PYTHON)):
        argv = _launcher(python)
        probe = [*argv[:-1], argv[-1].replace("main(sys.argv[1:])", "")]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                probe, capture_output=True, timeout=scaled(60), cwd="/", **_as(user)
            )  # type: ignore[call-overload]
            if done.returncode == 0:
                return argv
    return None


@contextlib.contextmanager
def running_agent(
    user: str, socket_path: Path, root: Path, config: Path | None = None, *clients: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The agent listening on ``socket_path`` as ``user``, ended (SIGTERM) on leaving."""
    argv = agent_python(user)
    if argv is None:
        raise RuntimeError(f"no Python that {user} can run imports {AGENT_MODULE}")
    args = ["--socket", str(socket_path), "--root", str(root)]
    args += ["--config", str(config)] if config is not None else []
    for client in clients:
        args += ["--client-user", client]
    log = (socket_path.parent / "agent.log").open("ab")
    proc = subprocess.Popen(
        [*argv, *args],
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # the agent's unit's, not ours
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd="/",
        start_new_session=True,
        **_as(user),  # type: ignore[arg-type]
    )
    try:
        wait_for(lambda: socket_path.exists() or proc.poll() is not None, scaled(30), "agent")
        if proc.poll() is not None:
            told = (socket_path.parent / "agent.log").read_text()
            raise RuntimeError(f"the agent exited: {told}")
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
