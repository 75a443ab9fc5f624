"""The consumer's side of the browser agent: a stack's processes started and ended through it.

With ``browser_user`` and ``browser_agent_socket`` set, the consumer holds no capability: it
cannot start a process as another user, signal one, read its memory or write its files. The
browser agent (consumer.browser.agent.browser_agent) runs as the browser's user and does those
things on request, for the stacks and profiles it made and nothing else. Every call is one
connection, one request and one answer (consumer.browser.agent.agent_protocol), with a deadline on
both sides; but for each started stack one connection stays open until its stop (``hold``): when
this process ends without a stop, however it ends, the kernel closes it and the agent ends the
stack. Without those settings the stack is started here (``LocalStackControl``), as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import socket
from pathlib import Path
from typing import Any

import psutil

from scrapefleet.common.constants import PROFILE_DIR_FREE_WAIT_S
from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.agent.agent_protocol import MAX_ANSWER_BYTES, encode
from scrapefleet.consumer.browser.stack import grid_jvm
from scrapefleet.consumer.browser.stack.process_control import (
    GridConfig,
    LocalStackControl,
    StackControl,
    StackPrograms,
)
from scrapefleet.consumer.browser.stack.processes import KillResult

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0  # a quick verb: the agent answers at once or is stuck
XVFB_START_TIMEOUT_S = 60.0  # several displays may be tried, each waited for
_MARGIN_S = 10.0  # over the time the agent itself is allowed for a verb


class AgentClient:
    """Calls to the browser agent listening on ``socket_path``."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)

    def call(self, verb: str, deadline_s: float = CALL_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        """The agent's answer to one request; StackError with its reason when it refuses or
        cannot be reached in time."""
        conn, message = self._exchange(verb, deadline_s, fields)
        conn.close()
        return message

    def hold(self, **fields: Any) -> socket.socket:
        """A connection the agent holds a stack by, open until closed (or this process ends);
        StackError when the agent refuses it."""
        conn, _message = self._exchange("hold", CALL_TIMEOUT_S, fields)
        conn.settimeout(None)
        return conn

    def _exchange(
        self, verb: str, deadline_s: float, fields: dict[str, Any]
    ) -> tuple[socket.socket, dict[str, Any]]:
        """One request and its answer, the connection left open."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                conn.settimeout(deadline_s)
                conn.connect(str(self.socket_path))
                conn.sendall(encode({"verb": verb, **fields}))
                answer = _read_line(conn)
            except OSError as exc:  # TimeoutError included
                raise StackError(f"browser agent at {self.socket_path}: {verb}: {exc}") from exc
            return conn, _message(verb, answer)
        except BaseException:
            conn.close()
            raise


def _message(verb: str, answer: bytes) -> dict[str, Any]:
    """The answer's fields; StackError with the agent's reason when it refused."""
    try:
        message = json.loads(answer)
    except ValueError:
        raise StackError(f"browser agent: {verb}: no answer (the agent ended?)") from None
    if not isinstance(message, dict) or message.get("ok") is not True:
        error = message.get("error") if isinstance(message, dict) else None
        reason = error if isinstance(error, str) else repr(message)[:200]
        raise StackError(f"browser agent refused {verb}: {reason}")
    return message


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(8192)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_ANSWER_BYTES:
            raise OSError(f"answer over {MAX_ANSWER_BYTES} bytes")
    return data


def agent_stack_name(work_dir: Path) -> str:
    """The name the agent knows a stack by: its work directory's last two components (the
    host and the slot, under ``<state_dir>/stack``), under the agent's own directory."""
    return "/".join(Path(work_dir).parts[-2:])


def uses_agent(agent_socket: Path | None, browser_user: str | None) -> bool:
    """The stack goes through the agent: an agent is configured and the browser's user is
    another than ours."""
    if agent_socket is None or browser_user is None:
        return False
    try:
        return pwd.getpwnam(browser_user).pw_uid != os.geteuid()
    except KeyError:
        return True  # the agent's hello says what is wrong


def control_for(settings: Any, work_dir: Path, token: str) -> StackControl:
    """Where a stack's processes are started from: the agent, or this process."""
    if uses_agent(settings.browser_agent_socket, settings.browser_user):
        client = AgentClient(settings.browser_agent_socket)
        return AgentStackControl(client, settings, agent_stack_name(work_dir), token)
    return LocalStackControl(StackPrograms.of(settings), settings.browser_user, work_dir, token)


def agent_profile_dir(agent_socket: Path, name: str) -> Path:
    """A profile's directory made ready by the agent (its own, under the agent's directory)."""
    answer = AgentClient(agent_socket).call(
        "profile_ready", PROFILE_DIR_FREE_WAIT_S + _MARGIN_S, name=name
    )
    return Path(answer["path"])


class AgentStackControl:
    """One stack's processes, started and ended by the browser agent."""

    def __init__(self, client: AgentClient, settings: Any, name: str, token: str) -> None:
        self.client = client
        self.browser_user = settings.browser_user
        self.name = name
        self.token = token
        stop_s = float(settings.stack_stop_timeout_s)
        # The agent's stop: SIGTERM, SIGKILL, then a class archive checked by a JVM.
        self._stop_timeout_s = 2 * stop_s + grid_jvm.ARCHIVE_CHECK_TIMEOUT_S + _MARGIN_S
        self._tmp_dir = Path("/nonexistent")  # the agent says where, at prepare
        self._uid: int | None = None
        self._grid_pid: int | None = None
        self._xvfb_pid: int | None = None
        self._hold: socket.socket | None = None  # open while the stack runs (see hold)

    def _call(self, verb: str, deadline_s: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        return self.client.call(verb, deadline_s, stack=self.name, token=self.token, **fields)

    @property
    def tmp_dir(self) -> Path:
        return self._tmp_dir

    @property
    def browser_uid(self) -> int:
        if self._uid is None:
            self._uid = int(self.client.call("hello")["uid"])
        return self._uid

    @property
    def grid_pid(self) -> int | None:
        return self._grid_pid

    @property
    def xvfb_pid(self) -> int | None:
        return self._xvfb_pid

    def prepare(self) -> None:
        hello = self.client.call("hello")
        if hello["user"] != self.browser_user:
            raise StackError(
                f"browser_user is {self.browser_user!r}, but the browser agent at"
                f" {self.client.socket_path} runs as {hello['user']!r}"
            )
        self._uid = int(hello["uid"])
        self._tmp_dir = Path(self._call("prepare")["tmp_dir"])
        self._release_hold()
        self._hold = self.client.hold(stack=self.name, token=self.token)

    def _release_hold(self) -> None:
        if self._hold is not None:
            with contextlib.suppress(OSError):
                self._hold.close()
            self._hold = None

    def start_xvfb(self, fixed_display: int | None, width: int, height: int) -> int:
        answer = self._call(
            "start_xvfb", XVFB_START_TIMEOUT_S, display=fixed_display, width=width, height=height
        )
        self._xvfb_pid = int(answer["pid"])
        return int(answer["display"])

    def start_grid(self, config: GridConfig) -> None:
        answer = self._call(
            "start_grid",
            host=config.host,
            port=config.port,
            capacity=config.capacity,
            session_timeout_s=config.session_timeout_s,
            request_timeout_s=config.request_timeout_s,
            username=config.auth.username,
            password=config.auth.password,
            driver=config.driver,
        )
        self._grid_pid = int(answer["pid"])

    def running(self) -> tuple[bool, bool]:
        try:
            answer = self._call("running")
        except StackError:
            return False, False  # an agent that is gone runs nothing of ours
        return bool(answer["grid"]), bool(answer["xvfb"])

    def end_grid(self) -> None:
        self._call("end_grid", self._stop_timeout_s)
        self._grid_pid = None

    def grid_failed(self) -> str:
        return str(self._call("grid_failed")["log_tail"])

    def log_tail(self) -> str:
        return str(self._call("log_tail")["log_tail"])

    def stop(self) -> KillResult:
        self._grid_pid = self._xvfb_pid = None
        try:
            answer = self._call("stop", self._stop_timeout_s)
        except StackError as exc:
            self._release_hold()  # the agent may still stop it for a client gone
            # An agent that is gone took its stacks with it (its SIGTERM, its unit's cgroup);
            # one that is stuck is restarted by systemd. Either way there is nothing more to do
            # from here, and a consumer's start or drain must not fail for it.
            log.warning("%s", exc)
            return KillResult(ended=0, sigkilled=0, leftover_pids=())
        self._release_hold()  # stopped: the hold's end asks nothing more of the agent
        return KillResult(
            ended=int(answer["ended"]),
            sigkilled=int(answer["sigkilled"]),
            leftover_pids=tuple(int(pid) for pid in answer["leftover_pids"]),
        )

    def processes(self) -> list[psutil.Process]:
        found = []
        for pid in self._call("processes")["pids"]:
            try:
                found.append(psutil.Process(int(pid)))
            except psutil.Error:
                continue  # ended since the agent looked
        return found

    def pss_bytes(self) -> int:
        try:
            return int(self._call("pss")["bytes"])
        except StackError:
            return 0  # a metric: never an error

    def end_browser(self, profile_dir: Path, timeout_s: float) -> int:
        answer = self._call(
            "end_browser", timeout_s + _MARGIN_S, profile_dir=str(profile_dir), timeout_s=timeout_s
        )
        return int(answer["killed"])

    def await_browser_exit(self, procs: list[psutil.Process], timeout_s: float) -> int:
        if not procs:
            return 0
        pids = [p.pid for p in procs]
        # Waited for once, then killed after as long again: the agent's await_exit.
        answer = self._call("await_exit", 2 * timeout_s + _MARGIN_S, pids=pids, timeout_s=timeout_s)
        return int(answer["killed"])
