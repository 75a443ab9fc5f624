"""The browser agent: starts and ends browser stacks as the browser's user, for the consumer.

    python -m scrapefleet.consumer.browser.agent.browser_agent --socket PATH --root DIR
        [--config FILE] [--client-user NAME]...

It runs as the browser's user (the Ansible consumer role's ``scrapefleet-browser-agent`` unit,
``User=`` that user, no capability), so the consumer's unit needs none: the consumer asks, over
a unix socket in a directory only the consumer's group and this user can reach, and the agent
does exactly this and nothing else (consumer.browser.agent.agent_protocol checks every field):

- make a stack's directories under ``<root>/stacks/<name>`` and empty them at its stop;
- start that stack's Xvfb and Grid from its own command lines, with the programs its own
  settings name (``--config``: ``xvfb_binary``, ``java_binary``, ``chromium_binary``,
  ``chromedriver_binary``, ``grid_jar``, ``stack_stop_timeout_s``), never a request's;
- say whether they run, their PIDs, their memory (PSS), the tail of the Grid's log;
- signal and end the processes of a stack it started, and only those;
- make a profile's directory ready under ``<root>/profiles/<name>``;
- end a stack whose client is gone: the client holds one connection open per started stack
  (``hold``); when it ends before the stack was stopped (the consumer killed with SIGKILL, or
  crashed), the agent stops that stack, so that no page keeps acting for a dead attempt.

Each connection but a hold carries one request and one answer, read with a deadline.
``--client-user`` (repeatable) admits only those users' processes (the socket peer's
credentials); without it, the directory's permissions decide. SIGTERM ends every stack it
knows, then the agent.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pwd
import signal
import socket
import socketserver
import struct
import sys
import threading
from pathlib import Path
from typing import Any

from scrapefleet.common.errors import ScrapefleetError
from scrapefleet.common.settings import load_settings
from scrapefleet.consumer.browser.agent.agent_protocol import (
    MAX_REQUEST_BYTES,
    ProtocolError,
    encode,
    parse_request,
)
from scrapefleet.consumer.browser.sessions.profile_sessions import profile_dir, ready_profile_dir
from scrapefleet.consumer.browser.stack.grid_auth import GridCredentials
from scrapefleet.consumer.browser.stack.process_control import (
    GridConfig,
    LocalStackControl,
    StackPrograms,
)
from scrapefleet.consumer.browser.stack.processes import (
    await_exit,
    end_stack_processes,
    kill_and_wait,
)

log = logging.getLogger("scrapefleet.browser_agent")

READ_TIMEOUT_S = 5.0  # a client that does not send its whole request in this long is dropped
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class BrowserAgent:
    """The stacks and profiles under ``root``, started with ``programs``."""

    def __init__(self, programs: StackPrograms, root: Path) -> None:
        self.programs = programs
        self.root = Path(root).resolve()
        self.stacks_dir = self.root / "stacks"
        self.profiles_dir = self.root / "profiles"
        for folder in (self.stacks_dir, self.profiles_dir):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._stacks: dict[str, LocalStackControl] = {}
        self._lock = threading.Lock()

    def handle(self, verb: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The answer's fields for one checked request; StackError or OSError when it fails."""
        if verb == "hello":
            return {"uid": os.geteuid(), "user": pwd.getpwuid(os.geteuid()).pw_name}
        if verb == "profile_ready":
            return {"path": str(ready_profile_dir(profile_dir(self.profiles_dir, fields["name"])))}
        if verb == "prepare":
            return self._prepare(fields["stack"], fields["token"])
        if verb in ("start_xvfb", "start_grid"):  # into the directories prepare made
            control = self._prepared(fields["stack"])
        else:
            control = self._control(fields["stack"], fields["token"])
        return _STACK_VERBS[verb](self, control, fields)

    def _control(self, name: str, token: str) -> LocalStackControl:
        """The stack of that name, as prepared; one it does not know (a consumer's stack from
        before its restart) is looked at through its work directory's mark, and not kept."""
        with self._lock:
            control = self._stacks.get(name)
        if control is not None:
            return control
        return LocalStackControl(self.programs, None, self.stacks_dir / name, token)

    def _prepared(self, name: str) -> LocalStackControl:
        with self._lock:
            control = self._stacks.get(name)
        if control is None:
            raise ProtocolError(f"stack {name} is not prepared")
        return control

    def _prepare(self, name: str, token: str) -> dict[str, Any]:
        with self._lock:
            earlier = self._stacks.pop(name, None)
        if earlier is not None and any(earlier.running()):
            earlier.stop()  # the consumer stops before it starts again: a stray start
        control = LocalStackControl(self.programs, None, self.stacks_dir / name, token)
        control.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        control.prepare()
        with self._lock:
            self._stacks[name] = control
        return {"tmp_dir": str(control.tmp_dir)}

    def _stop(self, control: LocalStackControl, fields: dict[str, Any]) -> dict[str, Any]:
        result = control.stop()
        with self._lock:
            if self._stacks.get(fields["stack"]) is control:
                del self._stacks[fields["stack"]]
        return {
            "ended": result.ended,
            "sigkilled": result.sigkilled,
            "leftover_pids": list(result.leftover_pids),
        }

    def _end_browser(self, control: LocalStackControl, fields: dict[str, Any]) -> dict[str, Any]:
        """Kill the stack's processes naming one session's profile directory: one in the
        stack's TMPDIR (a session chromedriver made) or a profile's of this agent."""
        folder = Path(os.path.normpath(fields["profile_dir"]))
        if not any(folder.is_relative_to(d) for d in (control.tmp_dir, self.profiles_dir)):
            raise ProtocolError(f"end_browser: profile_dir {folder} is not this stack's")
        needle = str(folder)
        ours = [p for p in control.processes() if any(needle in a for a in _cmdline(p))]
        return {"killed": kill_and_wait(ours, fields["timeout_s"])}

    def _await_exit(self, control: LocalStackControl, fields: dict[str, Any]) -> dict[str, Any]:
        """Wait for the given processes of the stack to exit; kill those left after the time
        given. PIDs that are not the stack's are left alone."""
        wanted = set(fields["pids"])
        ours = [p for p in control.processes() if p.pid in wanted]
        return {"killed": await_exit(ours, fields["timeout_s"])}

    def held(self, name: str, token: str) -> LocalStackControl:
        """The prepared stack a client holds from now on; ProtocolError if there is none."""
        control = self._prepared(name)
        if control.marker.token != token:
            raise ProtocolError(f"hold: stack {name} was prepared with another token")
        return control

    def client_gone(self, name: str, control: LocalStackControl) -> None:
        """The client's hold on ``control`` ended: stop it unless it was stopped (or prepared
        again, a new control) meanwhile."""
        with self._lock:
            if self._stacks.get(name) is not control:
                return
            del self._stacks[name]
        log.warning("the client of stack %s is gone without stopping it: stopping it", name)
        with contextlib.suppress(Exception):
            control.stop()

    def stop_all(self) -> None:
        with self._lock:
            stacks = list(self._stacks.values())
            self._stacks.clear()
        for control in stacks:
            with contextlib.suppress(Exception):
                control.stop()


def _cmdline(proc: Any) -> list[str]:
    try:
        return list(proc.cmdline())
    except Exception:
        return []


def _grid_config(fields: dict[str, Any]) -> GridConfig:
    return GridConfig(
        host=fields["host"],
        port=fields["port"],
        capacity=fields["capacity"],
        session_timeout_s=fields["session_timeout_s"],
        request_timeout_s=fields["request_timeout_s"],
        auth=GridCredentials(fields["username"], fields["password"]),
        driver=fields["driver"],
    )


def _start_xvfb(control: LocalStackControl, fields: dict[str, Any]) -> dict[str, Any]:
    display = control.start_xvfb(fields["display"], fields["width"], fields["height"])
    return {"display": display, "pid": control.xvfb_pid}


def _start_grid(control: LocalStackControl, fields: dict[str, Any]) -> dict[str, Any]:
    control.start_grid(_grid_config(fields))
    return {"pid": control.grid_pid}


def _running(control: LocalStackControl, _fields: dict[str, Any]) -> dict[str, Any]:
    grid, xvfb = control.running()
    return {"grid": grid, "xvfb": xvfb}


def _end_grid(control: LocalStackControl, _fields: dict[str, Any]) -> dict[str, Any]:
    if control.grid_pid is None:  # a Grid this agent did not start: its token's processes
        end_stack_processes(control.marker, [], control.programs.stop_timeout_s)
    control.end_grid()
    return {}


_STACK_VERBS: dict[str, Any] = {
    "start_xvfb": lambda agent, control, fields: _start_xvfb(control, fields),
    "start_grid": lambda agent, control, fields: _start_grid(control, fields),
    "running": lambda agent, control, fields: _running(control, fields),
    "end_grid": lambda agent, control, fields: _end_grid(control, fields),
    "grid_failed": lambda agent, control, fields: {"log_tail": control.grid_failed()},
    "log_tail": lambda agent, control, fields: {"log_tail": control.log_tail()},
    "stop": BrowserAgent._stop,
    "processes": lambda agent, control, fields: {"pids": [p.pid for p in control.processes()]},
    "pss": lambda agent, control, fields: {"bytes": control.pss_bytes()},
    "end_browser": BrowserAgent._end_browser,
    "await_exit": BrowserAgent._await_exit,
}


def answer_request(agent: BrowserAgent, line: bytes) -> dict[str, Any]:
    """The answer to one request line, refusals and failures included (never raises)."""
    try:
        verb, fields = parse_request(line)
    except ProtocolError as exc:
        log.warning("refused a request: %s", exc)
        return {"ok": False, "error": str(exc)}
    try:
        return {"ok": True, **agent.handle(verb, fields)}
    except ProtocolError as exc:
        log.warning("refused a request: %s", exc)
        return {"ok": False, "error": str(exc)}
    except (ScrapefleetError, OSError) as exc:
        return {"ok": False, "error": f"{verb}: {str(exc).strip()[:2000]}"}
    except Exception as exc:  # a bug here must not end the agent: say it, log it
        log.exception("%s failed", verb)
        return {"ok": False, "error": f"{verb}: {type(exc).__name__}: {exc}"}


def read_request(conn: socket.socket) -> bytes:
    """One line, at most MAX_REQUEST_BYTES (a longer one is returned as it is, and refused)."""
    data = b""
    while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
        chunk = conn.recv(MAX_REQUEST_BYTES + 1)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0] if len(data) <= MAX_REQUEST_BYTES else data


class _Handler(socketserver.BaseRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(READ_TIMEOUT_S)
        if not self.server.admits(conn):
            with contextlib.suppress(OSError):
                conn.sendall(encode({"ok": False, "error": "not a client of this agent"}))
            return
        try:
            line = read_request(conn)
        except OSError:
            return  # gone or too slow: nobody to answer
        with contextlib.suppress(ProtocolError):
            verb, fields = parse_request(line)
            if verb == "hold":
                self._hold(conn, fields)
                return
        with contextlib.suppress(OSError):
            conn.sendall(encode(answer_request(self.server.agent, line)))

    def _hold(self, conn: socket.socket, fields: dict[str, Any]) -> None:
        """Answer, then wait for the client's end of the connection, however long the stack
        runs: a client that is gone (its process ended) closes it at once."""
        agent = self.server.agent
        try:
            control = agent.held(fields["stack"], fields["token"])
        except ProtocolError as exc:
            with contextlib.suppress(OSError):
                conn.sendall(encode({"ok": False, "error": str(exc)}))
            return
        try:
            conn.sendall(encode({"ok": True}))
            conn.settimeout(None)
            while conn.recv(64):
                pass  # the client says nothing more: anything it sends is ignored
        except OSError:
            pass  # reset: gone too
        agent.client_gone(fields["stack"], control)


class AgentServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, agent: BrowserAgent, client_uids: set[int]) -> None:
        self.agent = agent
        self.client_uids = client_uids
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()  # an earlier agent's
        super().__init__(str(path), _Handler)
        # Whoever can reach the directory may connect: the directory is the gate.
        os.chmod(path, 0o666)

    def admits(self, conn: socket.socket) -> bool:
        if not self.client_uids:
            return True
        _pid, uid, _gid = _PEERCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        return uid in self.client_uids or uid == os.geteuid()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="browser_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--client-user", action="append", default=[])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
        uids = {pwd.getpwnam(name).pw_uid for name in args.client_user}
    except ScrapefleetError as exc:
        sys.exit(f"browser_agent: {exc}")
    except KeyError as exc:
        sys.exit(f"browser_agent: --client-user {exc.args[0]}: no such user")
    os.umask(0o077)  # what the stacks write is the browser user's alone
    agent = BrowserAgent(StackPrograms.of(settings), args.root)
    server = AgentServer(args.socket, agent, uids)

    def on_term(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log.info("browser agent listening on %s as uid %d", args.socket, os.geteuid())
    try:
        server.serve_forever()
    finally:
        server.server_close()
        agent.stop_all()
        with contextlib.suppress(FileNotFoundError):
            args.socket.unlink()


if __name__ == "__main__":
    main()
