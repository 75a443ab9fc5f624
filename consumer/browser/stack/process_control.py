"""Start, watch and end one browser stack's processes (Xvfb, the Grid's java), here.

``LocalStackControl`` does it in the calling process: the consumer's own when the browser runs
as the consumer's user (the demo, most tests) or the consumer runs as root, and the browser
agent's (consumer.browser.agent.browser_agent) on a deployed host, where the agent runs as the
browser's user and the consumer holds no capability. consumer.browser.agent.agent_client does the
same through the agent; consumer.browser.stack.browser_stack drives either through ``StackControl``.

The programs come from ``StackPrograms`` (the settings of whoever runs this code, never a
request's); a request gives only bounded numbers and the Grid's credentials (``GridConfig``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.stack import grid_jvm
from scrapefleet.consumer.browser.stack.grid_auth import GridCredentials, write_private
from scrapefleet.consumer.browser.stack.host_needs import (
    AUTO_DISPLAY_TRIES,
    FIRST_AUTO_DISPLAY,
    clear_stale_display,
    find_grid_jar,
    read_line,
    stack_tmp_dir,
    tail,
    x_socket,
)
from scrapefleet.consumer.browser.stack.processes import (
    TOKEN_ENV,
    WORK_DIR_ENV,
    KillResult,
    StackMarker,
    await_exit,
    end_processes_naming,
    end_stack_processes,
    find_stack_processes,
    pss_bytes,
)
from scrapefleet.consumer.browser.stack.run_as import (
    BrowserUser,
    resolve_browser_user,
    stack_environment,
)
from scrapefleet.consumer.browser.stack.watchdog import StackWatchdog

XVFB_READY_TIMEOUT_S = 10.0
SESSION_RETRY_INTERVAL_S = 1  # Grid re-offers a queued session request this often


@dataclass(frozen=True)
class StackPrograms:
    """What a stack runs and how long its stop may take: from the settings of the process that
    starts it (the consumer's, or the browser agent's own file), never from a request."""

    xvfb: Path
    java: Path
    chromium: Path
    chromedriver: Path
    grid_jar: Path | None
    stop_timeout_s: float

    @classmethod
    def of(cls, settings: Any) -> StackPrograms:
        return cls(
            xvfb=Path(settings.xvfb_binary),
            java=Path(settings.java_binary),
            chromium=Path(settings.chromium_binary),
            chromedriver=Path(settings.chromedriver_binary),
            grid_jar=settings.grid_jar,
            stop_timeout_s=float(settings.stack_stop_timeout_s),
        )


@dataclass(frozen=True)
class GridConfig:
    """What the Grid's config file says that the consumer decides."""

    host: str  # for the file's comment only
    port: int
    capacity: int
    session_timeout_s: int
    request_timeout_s: int
    auth: GridCredentials
    # What serves the sessions: "grid" (Selenium Grid standalone) or "chromedriver" (one
    # chromedriver server, many sessions: the same W3C and BiDi endpoints, no JVM, no relay).
    driver: str = "grid"


class StackControl(Protocol):
    """One stack's processes and directories, wherever they are started from."""

    @property
    def tmp_dir(self) -> Path: ...

    @property
    def browser_uid(self) -> int: ...

    @property
    def grid_pid(self) -> int | None: ...

    @property
    def xvfb_pid(self) -> int | None: ...

    def prepare(self) -> None: ...

    def start_xvfb(self, fixed_display: int | None, width: int, height: int) -> int: ...

    def start_grid(self, config: GridConfig) -> None: ...

    def running(self) -> tuple[bool, bool]: ...

    def end_grid(self) -> None: ...

    def grid_failed(self) -> str: ...

    def log_tail(self) -> str: ...

    def stop(self) -> KillResult: ...

    def processes(self) -> list[psutil.Process]: ...

    def pss_bytes(self) -> int: ...

    def end_browser(self, profile_dir: Path, timeout_s: float) -> int: ...

    def await_browser_exit(self, procs: list[psutil.Process], timeout_s: float) -> int: ...


class LocalStackControl:
    """A stack's processes started by this process, as ``user_name`` (needs root or
    CAP_SETUID/CAP_SETGID when that is another user; None: as ours)."""

    def __init__(
        self, programs: StackPrograms, user_name: str | None, work_dir: Path, token: str
    ) -> None:
        self.programs = programs
        self.user_name = user_name
        self.work_dir = Path(work_dir).resolve()
        self.home_dir = self.work_dir / "home"
        self._tmp_dir = stack_tmp_dir(self.work_dir, token)
        self.config_path = self.work_dir / "grid.toml"
        self.grid_log = self.work_dir / "grid.log"
        self.marker = StackMarker(token, self._tmp_dir, self.work_dir)
        self._user = BrowserUser(os.geteuid(), os.getegid(), None)  # resolved at prepare
        self.display: int | None = None
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._grid: subprocess.Popen[bytes] | None = None
        self._archive: Path | None = None  # the host's class archive for the Grid's jar
        self._archive_mapped = False  # the Grid was started from it
        # Ends the stack if this process dies without stopping it (consumer.browser.stack.watchdog).
        self._watchdog: StackWatchdog | None = None

    @property
    def tmp_dir(self) -> Path:
        return self._tmp_dir

    @property
    def browser_uid(self) -> int:
        return resolve_browser_user(self.user_name).uid

    @property
    def grid_pid(self) -> int | None:
        return self._grid.pid if self._grid else None

    @property
    def xvfb_pid(self) -> int | None:
        return self._xvfb.pid if self._xvfb else None

    def prepare(self) -> None:
        """The stack's HOME and TMPDIR, the browser user's own, and its watchdog."""
        self._user = resolve_browser_user(self.user_name)
        for folder in (self.home_dir, self._tmp_dir):
            folder.mkdir(parents=True, exist_ok=True)
            if self._user.switches:
                os.chown(folder, self._user.uid, self._user.gid)
        if self._watchdog is None:
            self._watchdog = StackWatchdog(self.marker, self.programs.stop_timeout_s)

    def running(self) -> tuple[bool, bool]:
        """Whether the Grid and Xvfb run."""
        grid, xvfb = (p is not None and p.poll() is None for p in (self._grid, self._xvfb))
        return grid, xvfb

    # -- Xvfb --------------------------------------------------------------------------------

    def start_xvfb(self, fixed_display: int | None, width: int, height: int) -> int:
        """Start Xvfb on ``fixed_display``, or on the first free display from
        FIRST_AUTO_DISPLAY; the display it runs on."""
        candidates = (
            [fixed_display]
            if fixed_display is not None
            else range(FIRST_AUTO_DISPLAY, FIRST_AUTO_DISPLAY + AUTO_DISPLAY_TRIES)
        )
        for display in candidates:
            if not clear_stale_display(display) or x_socket(display).exists():
                continue
            if self._launch_xvfb(display, width, height, fixed=fixed_display is not None):
                self.display = display
                return display
        raise StackError(f"no free X display (tried {list(candidates)[:3]}...)")

    def _launch_xvfb(self, display: int, width: int, height: int, fixed: bool) -> bool:
        """Start Xvfb on one display; False if another server took it first."""
        read_fd, write_fd = os.pipe()
        command = [
            str(self.programs.xvfb),
            f":{display}",
            "-screen", "0", f"{width}x{height}x24",
            "-nolisten", "tcp",
            "-displayfd", str(write_fd),  # Xvfb writes the display here once it accepts clients
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command,
                pass_fds=[write_fd],
                env=stack_environment(
                    self.home_dir, self._tmp_dir, **{WORK_DIR_ENV: str(self.work_dir)}
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=(self.work_dir / "xvfb.log").open("ab"),
                start_new_session=True,  # our signals only, not the consumer's terminal's
                **self._as_browser_user(),
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            raise StackError(f"cannot run Xvfb: {exc}") from exc
        os.close(write_fd)
        try:
            answer = read_line(read_fd, XVFB_READY_TIMEOUT_S)
        finally:
            os.close(read_fd)
        if answer.strip() == str(display).encode():
            self._xvfb = proc
            if self._watchdog is not None:
                self._watchdog.watch(proc.pid)
            return True
        proc.kill()
        proc.wait()
        if fixed:
            raise StackError(f"Xvfb :{display} did not start: {tail(self.work_dir / 'xvfb.log')}")
        return False

    def _as_browser_user(self) -> dict[str, Any]:
        """Popen arguments that start a stack process as the browser's user (none: as us)."""
        if not self._user.switches:
            return {}
        return {"user": self._user.uid, "group": self._user.gid, "extra_groups": []}

    # -- the Grid ----------------------------------------------------------------------------

    def start_grid(self, config: GridConfig) -> None:
        """Write the Grid's config and start its JVM (not waited for: the caller polls it); or,
        with ``config.driver`` "chromedriver", start a chromedriver server in its place."""
        if config.driver == "chromedriver":
            self._start_chromedriver(config)
            return
        jar = find_grid_jar(self.programs.grid_jar)
        self._write_grid_config(config)
        env = stack_environment(
            self.home_dir,
            self._tmp_dir,
            DISPLAY=f":{self.display}",
            **{TOKEN_ENV: self.marker.token, WORK_DIR_ENV: str(self.work_dir)},
        )
        self._archive = grid_jvm.archive_path(self.work_dir, jar)
        self._archive_mapped = self._archive.is_file()
        pending = self._tmp_dir / grid_jvm.PENDING_NAME
        command = [
            str(self.programs.java),
            *grid_jvm.jvm_args(self._archive if self._archive_mapped else None, pending),
            f"-Djava.io.tmpdir={self._tmp_dir}",
            "-jar", str(jar),
            # Relative (the Grid runs in work_dir): the Grid splits a --config value at spaces.
            "standalone", "--config", self.config_path.name,
        ]  # fmt: skip
        self._run_driver_server(command, env, "the Grid")

    def _start_chromedriver(self, config: GridConfig) -> None:
        """A chromedriver server on the Grid's port: it takes the same session requests (every
        browser its child, with the stack's TMPDIR and marker), answers ``/status`` ready, and
        ignores the Grid's credentials. It listens on loopback only (its default)."""
        env = stack_environment(
            self.home_dir,
            self._tmp_dir,
            DISPLAY=f":{self.display}",
            **{TOKEN_ENV: self.marker.token, WORK_DIR_ENV: str(self.work_dir)},
        )
        self._archive = None
        command = [str(self.programs.chromedriver), f"--port={config.port}"]
        self._run_driver_server(command, env, "chromedriver")

    def _run_driver_server(self, command: list[str], env: dict[str, str], what: str) -> None:
        """The process sessions are asked of (the Grid or chromedriver), in a session of its
        own, logging to the Grid's log, watched by the stack's watchdog."""
        try:
            self._grid = subprocess.Popen(
                command,
                env=env,
                cwd=self.work_dir,
                stdin=subprocess.DEVNULL,
                stdout=self.grid_log.open("ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as_browser_user(),
            )
        except OSError as exc:
            raise StackError(f"cannot run {what}: {exc}") from exc
        if self._watchdog is not None:
            self._watchdog.watch(self._grid.pid)

    def _write_grid_config(self, config: GridConfig) -> None:
        stereotype = json.dumps(
            {
                "browserName": "chrome",
                "platformName": "linux",
                "goog:chromeOptions": {"binary": str(self.programs.chromium)},
            }
        )
        text = f"""# Written by scrapefleet for host {config.host}; rewritten at every start.
[server]
host = "127.0.0.1"
port = {config.port}

{config.auth.router_section()}
[node]
detect-drivers = false
selenium-manager = false
max-sessions = {config.capacity}
override-max-sessions = true
session-timeout = {config.session_timeout_s}

[sessionqueue]
session-request-timeout = {config.request_timeout_s}
session-retry-interval = {SESSION_RETRY_INTERVAL_S}

[[node.driver-configuration]]
display-name = "Chromium"
webdriver-executable = "{self.programs.chromedriver}"
max-sessions = {config.capacity}
stereotype = '{stereotype}'
"""
        # Readable by the Grid's user alone: it holds the Grid's password.
        owner = (self._user.uid, self._user.gid) if self._user.switches else None
        write_private(self.config_path, text, owner)

    def end_grid(self) -> None:
        """Reap an exited Grid and end what it left (drivers, browsers: they carry the stack's
        token in their environment; Xvfb does not), so that its successor starts clean."""
        dead = self._grid
        self._grid = None
        if dead is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                dead.wait(timeout=1.0)
        nowhere = self.work_dir / "grid-only"  # matches no command line and no TMPDIR
        end_stack_processes(
            StackMarker(self.marker.token, nowhere, nowhere),
            [dead.pid] if dead is not None else [],
            self.programs.stop_timeout_s,
        )

    def grid_failed(self) -> str:
        """The Grid exited while it started: the class archive it mapped (if any) is not used
        again; the tail of its log."""
        if self._archive is not None and self._archive_mapped:
            grid_jvm.forget_archive(self._archive)
        return self.log_tail()

    def log_tail(self) -> str:
        return tail(self.grid_log)

    # -- the whole stack ---------------------------------------------------------------------

    def stop(self) -> KillResult:
        """End every process of the stack, verify none is left, empty its directories."""
        roots = [p.pid for p in (self._grid, self._xvfb) if p is not None]
        result = end_stack_processes(self.marker, roots, self.programs.stop_timeout_s)
        for proc in (self._grid, self._xvfb):
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)  # reap our own children: no zombies left
        if self.display is not None and self._xvfb is not None:
            clear_stale_display(self.display)  # Xvfb leaves its lock when SIGKILLed
        self._grid = self._xvfb = None
        if self._watchdog is not None:
            self._watchdog.release()
            self._watchdog = None
        if self._archive is not None and not self._archive_mapped:
            pending = self._tmp_dir / grid_jvm.PENDING_NAME
            grid_jvm.adopt_archive(self.programs.java, pending, self._archive)
        for folder in (self._tmp_dir, self.home_dir):
            shutil.rmtree(folder, ignore_errors=True)
        return result

    def processes(self) -> list[psutil.Process]:
        """Live processes of this stack (Grid, Xvfb, drivers, browsers)."""
        roots = [p.pid for p in (self._grid, self._xvfb) if p is not None]
        return find_stack_processes(self.marker, roots)

    def pss_bytes(self) -> int:
        return pss_bytes(self.processes())

    def end_browser(self, profile_dir: Path, timeout_s: float) -> int:
        """Kill the processes of one session's browser (found by its profile directory)."""
        return end_processes_naming(profile_dir, timeout_s)

    def await_browser_exit(self, procs: list[psutil.Process], timeout_s: float) -> int:
        """Wait for a quit browser's ``procs`` to exit; kill those still alive after
        ``timeout_s``. How many had to be killed."""
        return await_exit(procs, timeout_s)
