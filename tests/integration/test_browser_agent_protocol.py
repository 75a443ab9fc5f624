"""The browser agent refuses whatever is outside its protocol, with the reason, and lives on.

A real agent process (consumer.browser.agent.browser_agent) as this test's user; requests written on
its socket byte for byte, as a compromised consumer could.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapefleet.common.errors import StackError
from scrapefleet.consumer.browser.agent.agent_client import AgentClient
from scrapefleet.consumer.browser.agent.agent_protocol import MAX_REQUEST_BYTES
from tests.browser.agent_process import running_agent
from tests.waiting import scaled

pytestmark = pytest.mark.timeout(120)

STACK = {"stack": "h1/a", "token": "0123456789abcdef0123456789abcdef"}


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Path]:
    socket_path = tmp_path / "run" / "agent.sock"
    socket_path.parent.mkdir()
    me = pwd.getpwuid(os.geteuid()).pw_name
    with running_agent(me, socket_path, tmp_path / "agent"):
        yield socket_path


def _raw(socket_path: Path, data: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(scaled(10))
        conn.connect(str(socket_path))
        conn.sendall(data)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    message: dict[str, Any] = json.loads(answer)
    return message


def _ask(socket_path: Path, request: dict[str, Any]) -> dict[str, Any]:
    return _raw(socket_path, json.dumps(request).encode() + b"\n")


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"verb": "exec", "argv": ["/bin/sh"]}, "unknown verb 'exec'"),
        ({"verb": "prepare"}, "prepare: missing field 'stack'"),
        (
            {**STACK, "verb": "start_grid", "argv": ["/bin/sh", "-c", "id"]},
            "start_grid: unknown field 'argv'",
        ),
        (
            {**STACK, "verb": "start_xvfb", "display": 99, "xvfb_binary": "/bin/sh"},
            "start_xvfb: unknown field 'xvfb_binary'",
        ),
        (
            {**STACK, "verb": "start_xvfb", "display": 99, "width": "800 -fp /etc", "height": 6},
            "start_xvfb: width must be an integer from 320 to 7680",
        ),
        ({**STACK, "verb": "prepare", "stack": "../../etc"}, "prepare: stack must be"),
        ({**STACK, "verb": "stop", "token": "x; rm -rf /"}, "stop: token must be"),
        ({"verb": "profile_ready", "name": "../escape"}, "profile_ready: name must be"),
        (
            {**STACK, "verb": "start_xvfb", "display": 99, "width": 800, "height": 600},
            "stack h1/a is not prepared",
        ),
    ],
)
def test_a_request_outside_the_protocol_is_refused_naming_what(
    agent: Path, request_: dict[str, Any], error: str
) -> None:
    answer = _ask(agent, request_)
    assert answer["ok"] is False and answer["error"].startswith(error), answer
    assert _ask(agent, {"verb": "hello"})["ok"] is True  # and the agent lives on


def test_an_oversized_or_garbled_request_is_refused(agent: Path) -> None:
    big = json.dumps({"verb": "hello", "pad": "x" * MAX_REQUEST_BYTES}).encode() + b"\n"
    assert _raw(agent, big) == {"ok": False, "error": f"request over {MAX_REQUEST_BYTES} bytes"}
    garbled = _raw(agent, b"\x00\xffnot json\n")
    assert garbled == {"ok": False, "error": "request is not one JSON object"}
    with pytest.raises(StackError, match="refused hello: request over"):
        AgentClient(agent).call("hello", pad="y" * MAX_REQUEST_BYTES)


def test_the_agent_signals_no_process_that_is_not_one_of_its_stacks(agent: Path) -> None:
    """A consumer that names another process (the agent's user could signal it) gets nothing
    done: the agent ends only what it finds of the stack it names."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        answer = _ask(agent, {**STACK, "verb": "await_exit", "pids": [bystander.pid],
                              "timeout_s": 0.2})  # fmt: skip
        assert answer == {"ok": True, "killed": 0}
        refused = _ask(agent, {**STACK, "verb": "end_browser", "profile_dir": "/",
                               "timeout_s": 1})  # fmt: skip
        assert refused["ok"] is False and "is not this stack's" in refused["error"], refused
        assert bystander.poll() is None, "the agent ended a process that is not its stack's"
    finally:
        bystander.kill()
        bystander.wait()


def test_only_the_named_client_user_is_answered() -> None:
    """With --client-user, a process of any other user that reaches the socket is refused."""
    if os.geteuid() != 0:
        pytest.skip("running the agent as another user needs root (as CI runs the tests)")
    nobody = pwd.getpwnam("nobody")
    # Under /tmp, reachable by nobody: pytest's own tmp dirs are private to root.
    folder = Path(tempfile.mkdtemp(prefix="sf-agent-"))
    try:
        folder.chmod(0o755)
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        socket_path = folder / "agent.sock"
        with running_agent("nobody", socket_path, folder / "agent", None, "daemon"):
            answer = _ask(socket_path, {"verb": "hello"})  # from root, not the named client
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert answer == {"ok": False, "error": "not a client of this agent"}
