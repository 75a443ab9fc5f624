"""The browser runs as another user, sandboxed, and cannot read what the consumer holds.

Real Xvfb, Grid and Chromium with ``browser_user = "nobody"``: started by a root consumer
itself, and (as on a deployed host, where the consumer holds no capability) by the browser
agent running as ``nobody``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scrapefleet.common.errors import StackError
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.agent.agent_client import agent_profile_dir
from scrapefleet.consumer.browser.sessions.session_operations import quit_driver
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from scrapefleet.consumer.browser.stack.host_needs import find_grid_jar
from scrapefleet.consumer.browser.stack.processes import TOKEN_ENV, WORK_DIR_ENV, is_gone
from scrapefleet.consumer.browser.stack.run_as import needs_no_sandbox
from tests.browser.agent_process import running_agent
from tests.browser.site import LocalSite
from tests.waiting import scaled, wait_for

pytestmark = pytest.mark.timeout(120)

BROWSER_USER = "nobody"
SECRET = "database_url = 'postgresql://consumer:s3cret-of-the-consumer@db/scrapefleet'"


def _skip_unless_root_and_nobody() -> None:
    if os.geteuid() != 0:
        pytest.skip("switching the browser's user needs root (run the tests as root, as CI does)")
    try:
        pwd.getpwnam(BROWSER_USER)
    except KeyError:
        pytest.skip(f"no {BROWSER_USER!r} user on this machine")


@pytest.fixture
def world_readable_dir() -> Iterator[Path]:
    """Under /tmp with mode 0755: pytest's own tmp dirs are private to root, and the jar must
    be readable by the browser's user whatever the checkout's location."""
    folder = Path(tempfile.mkdtemp(prefix="sf-browser-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_browser_runs_as_its_own_user_sandboxed_and_cannot_read_the_consumers_settings(
    settings: Settings, site: LocalSite, world_readable_dir: Path
) -> None:
    _skip_unless_root_and_nobody()
    jar = world_readable_dir / "selenium-server.jar"
    shutil.copyfile(find_grid_jar(settings.grid_jar), jar)
    jar.chmod(0o644)
    consumer_settings = world_readable_dir / "consumer.toml"  # what the consumer keeps to itself
    consumer_settings.write_text(SECRET + "\n")
    consumer_settings.chmod(0o600)
    as_nobody = settings.model_copy(update={"browser_user": BROWSER_USER, "grid_jar": jar})
    nobody = pwd.getpwnam(BROWSER_USER).pw_uid

    with BrowserStack(as_nobody, "sandboxed", 1, world_readable_dir / "stack") as stack:
        driver = stack.new_driver()
        try:
            driver.get(site.url("/item"))
            assert driver.title  # the page loaded, sandbox on
            driver.get(consumer_settings.as_uri())
            assert "s3cret" not in driver.page_source
            processes = [(p.uids().real, p.name(), p.cmdline(), p.pid) for p in stack.processes()]
            chromium = [(cmd, pid) for _, name, cmd, pid in processes if name.startswith("chrom")]
            chromium = [(cmd, pid) for cmd, pid in chromium if "chromedriver" not in cmd[0]]
            renderers = [pid for cmd, pid in chromium if "--type=renderer" in cmd]
            seccomp = [_seccomp_mode(pid) for pid in renderers]
        finally:
            quit_driver(driver)

    assert chromium, "no Chromium process seen"
    assert {uid for uid, *_ in processes} == {nobody}, "a stack process runs as another user"
    assert all("--no-sandbox" not in cmd for cmd, _ in chromium)
    assert renderers and set(seccomp) == {2}, f"renderers not sandboxed: {seccomp}"


def _seccomp_mode(pid: int) -> int:
    """2: a seccomp-bpf filter confines the process (Chromium's sandbox)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Seccomp:"):
            return int(line.split()[1])
    return -1


@pytest.mark.parametrize(
    ("sandbox", "uid", "no_sandbox"),
    [(None, 0, True), (None, 1000, False), (False, 1000, True), (True, 1000, False)],
)
def test_the_sandbox_is_on_unless_the_browser_is_root_or_it_is_turned_off(
    sandbox: bool | None, uid: int, no_sandbox: bool
) -> None:
    assert needs_no_sandbox(sandbox, uid) is no_sandbox


def test_a_sandbox_asked_for_a_root_browser_is_refused_with_the_reason() -> None:
    with pytest.raises(StackError, match="set browser_user"):
        needs_no_sandbox(True, 0)


# What a stack process may find in its environment: nothing the consumer was given.
STACK_ENV_NAMES = {"PATH", "LANG", "HOME", "TMPDIR", "DISPLAY", TOKEN_ENV, WORK_DIR_ENV}


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}  # ended meanwhile
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


def test_no_stack_process_gets_the_consumers_environment(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real Xvfb and Grid started by a consumer whose environment holds its database URL and
    proxy credentials: /proc/<pid>/environ of each holds none of it (readable by the browser's
    user, which owns those processes)."""
    monkeypatch.setenv("SCRAPEFLEET_DATABASE_URL", "postgresql://c:s3cret-db-pw@db/scrapefleet")
    monkeypatch.setenv("SCRAPEFLEET_BROWSER_PROXY", "http://u:s3cret-proxy-pw@proxy:3128")
    monkeypatch.setenv("https_proxy", "http://u:s3cret-proxy-pw@proxy:3128")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws")
    with BrowserStack(settings, "env", 1, tmp_path / "stack") as stack:
        environments = {
            (p.name(), p.pid): _environ(p.pid) for p in stack.processes() if p.is_running()
        }
    xvfb = [env for (name, _), env in environments.items() if name == "Xvfb"]
    assert xvfb, f"no Xvfb among {sorted(environments)}"
    for (name, pid), env in environments.items():
        leaked = [k for k, v in env.items() if "s3cret" in v or k == "SCRAPEFLEET_DATABASE_URL"]
        assert not leaked, f"{name} ({pid}) holds {leaked}"
        assert set(env) <= STACK_ENV_NAMES, f"{name} ({pid}): {sorted(set(env) - STACK_ENV_NAMES)}"


CONSUMER_SECRETS = {
    "SCRAPEFLEET_DATABASE_URL": "postgresql://c:s3cret-db-pw@db/scrapefleet",
    "https_proxy": "http://u:s3cret-proxy-pw@proxy:3128",
}


@pytest.fixture
def agent_socket(settings: Settings, world_readable_dir: Path) -> Iterator[Path]:
    """A real browser agent running as ``nobody``: its directory (the stacks' and profiles')
    is nobody's, its socket in a directory of its own, its programs from its own settings."""
    _skip_unless_root_and_nobody()
    nobody = pwd.getpwnam(BROWSER_USER)
    jar = world_readable_dir / "selenium-server.jar"
    shutil.copyfile(find_grid_jar(settings.grid_jar), jar)
    jar.chmod(0o644)
    config = world_readable_dir / "browser-agent.toml"
    config.write_text(f'grid_jar = "{jar}"\n')
    config.chmod(0o644)
    root, sockets = world_readable_dir / "agent", world_readable_dir / "run"
    for folder in (root, sockets):
        folder.mkdir(mode=0o750)
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    socket_path = sockets / "agent.sock"
    with running_agent(BROWSER_USER, socket_path, root, config):
        yield socket_path


def test_through_the_agent_the_stack_runs_as_the_browser_user_and_is_ended_by_it(
    settings: Settings,
    site: LocalSite,
    world_readable_dir: Path,
    agent_socket: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer starts nothing itself: Xvfb, the Grid and Chromium are nobody's, none holds
    the consumer's environment, their PSS is read, a quit browser's processes end, and the stop
    leaves no process and an empty work directory."""
    for name, value in CONSUMER_SECRETS.items():
        monkeypatch.setenv(name, value)
    through_agent = settings.model_copy(
        update={"browser_user": BROWSER_USER, "browser_agent_socket": agent_socket}
    )
    nobody = pwd.getpwnam(BROWSER_USER).pw_uid
    stack = BrowserStack(through_agent, "agent", 1, world_readable_dir / "consumer" / "a")
    with stack:
        tmp_dir = stack.tmp_dir  # the agent's (under /tmp when its path is too long)
        assert tmp_dir.stat().st_uid == nobody
        driver = stack.new_driver()
        try:
            driver.get(site.url("/item"))
            assert driver.title
            seen = _described(stack.processes())
            environments = {(p.pid, n): _environ(p.pid) for p, _, n, _ in seen if p.is_running()}
            pss = stack.memory_pss_bytes()
            browser = [p for p, _, n, _ in seen if n.startswith("chrom") and n != "chromedriver"]
        finally:
            quit_driver(driver)
        # StackWebDriver.quit waited (through the agent) for its browser to be gone.
        assert all(is_gone(p) for p in browser)
    names = {name for _, _, name, _ in seen}
    assert {"Xvfb", "java"} <= names and any(n.startswith("chrom") for n in names), names
    assert {uid for _, uid, _, _ in seen} == {nobody}, "a stack process runs as another user"
    assert all("--no-sandbox" not in cmd for _, _, name, cmd in seen if name.startswith("chrom"))
    for (pid, name), env in environments.items():
        leaked = [k for k, v in env.items() if "s3cret" in v or k in CONSUMER_SECRETS]
        assert not leaked, f"{name} ({pid}) holds {leaked}"
        if name in ("Xvfb", "java"):  # Chromium's wrapper script adds its own variables
            assert set(env) <= STACK_ENV_NAMES, f"{name}: {sorted(set(env) - STACK_ENV_NAMES)}"
    assert pss > 50 * 2**20, f"PSS of the stack read as {pss} bytes"
    wait_for(lambda: all(is_gone(p) for p, *_ in seen), scaled(10), "the stack's processes")
    work = world_readable_dir / "agent" / "stacks" / "consumer" / "a"
    assert work.is_dir() and not (work / "home").exists() and not tmp_dir.exists()
    assert stack.processes() == []


def _described(procs: list[psutil.Process]) -> list[tuple[psutil.Process, int, str, list[str]]]:
    """(process, real uid, name, command line) of those still running."""
    described = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            described.append((proc, proc.uids().real, proc.name(), proc.cmdline()))
    return described


def test_a_profile_directory_is_made_by_the_agent_and_is_the_browser_users(
    agent_socket: Path, world_readable_dir: Path
) -> None:
    directory = agent_profile_dir(agent_socket, "acct-7")
    assert directory == world_readable_dir / "agent" / "profiles" / "acct-7"
    assert directory.stat().st_uid == pwd.getpwnam(BROWSER_USER).pw_uid
    assert directory.stat().st_mode & 0o777 == 0o700
    with pytest.raises(StackError, match="profile"):
        agent_profile_dir(agent_socket, "../escape")


HELD_CLIENT = """
import sys, time
from pathlib import Path
from scrapefleet.consumer.browser.stack.browser_stack import BrowserStack
from tests.browser.conftest import stack_settings
artifacts, agent_socket, work = (Path(arg) for arg in sys.argv[1:4])
settings = stack_settings(artifacts).model_copy(
    update={"browser_user": "nobody", "browser_agent_socket": agent_socket}
)
stack = BrowserStack(settings, "held", 1, work)
stack.start()
driver = stack.new_driver()  # a browser too, left running when this process is killed
print(" ".join(str(p.pid) for p in stack.processes()), flush=True)
time.sleep(600)
"""


def test_through_the_agent_a_stack_ends_when_its_client_is_killed(
    world_readable_dir: Path, agent_socket: Path, tmp_path: Path
) -> None:
    """A consumer killed with SIGKILL cannot stop its stack: the agent sees its hold on the
    stack end and stops it (Xvfb, the Grid, chromedriver and the browser)."""
    client = subprocess.Popen(
        [sys.executable, "-c", HELD_CLIENT, str(tmp_path), str(agent_socket),
         str(world_readable_dir / "consumer" / "held")],
        cwd=Path(__file__).resolve().parents[2],  # the checkout: tests.browser importable
        stdout=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        line = client.stdout.readline().decode()
        procs = [psutil.Process(int(pid)) for pid in line.split()]
        names = {p.name() for p in procs}
        assert {"Xvfb", "java", "chromedriver"} <= names, names
        os.kill(client.pid, signal.SIGKILL)
        client.wait(scaled(10))
        wait_for(lambda: all(is_gone(p) for p in procs), 60, "the dead client's stack to end")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
