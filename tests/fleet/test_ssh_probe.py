"""SSHProbe over real SSH to test hosts (network namespaces, or 127.0.0.1 ports)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from scrapefleet.common.errors import ProbeError
from scrapefleet.common.status.answer import parse_status_answer
from scrapefleet.common.status.document import HostStatus
from scrapefleet.producer.probes.ssh_probe import SSHProbe
from tests.fleet import harness
from tests.fleet.harness import Fleet, FleetHost, default_status

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(30)]

STATUS_COMMAND = "scrapefleet-consumer status --json"
MARGIN_S = 0.6  # scheduling slack on a loaded two-core CI machine


@pytest.fixture
def make_probe() -> Iterator[Callable[..., SSHProbe]]:
    probes: list[SSHProbe] = []

    def make(**kwargs: object) -> SSHProbe:
        kwargs.setdefault("reconnect_base_s", 0.05)  # recovery tests should not wait seconds
        probe = SSHProbe(**kwargs)  # type: ignore[arg-type]
        probes.append(probe)
        return probe

    yield make
    for probe in probes:
        probe.close()


def reason(result: HostStatus | ProbeError) -> str:
    assert isinstance(result, ProbeError), f"expected a probe failure, got {result}"
    return str(result)


def assert_healthy(results: dict[str, HostStatus | ProbeError], *names: str) -> None:
    for name in names:
        assert isinstance(results[name], HostStatus), f"{name}: {results[name]}"


def probe_until_ok(probe: SSHProbe, fleet: Fleet, name: str, within_s: float) -> HostStatus:
    deadline = time.monotonic() + within_s
    while True:
        result = probe.probe_all([fleet.hosts[name].target()])[name]
        if isinstance(result, HostStatus) or time.monotonic() > deadline:
            assert isinstance(result, HostStatus), f"{name} still failing: {result}"
            return result
        time.sleep(0.05)  # retry interval, bounded by the deadline


def test_valid_status_is_parsed(fleet: Fleet, hosts: list[FleetHost], make_probe) -> None:
    served = hosts[0].serve_status(running=4, state="draining", jobs_since_boot=17)
    results = make_probe().probe_all(fleet.targets())
    assert results["h1"] == served
    assert_healthy(results, "h2", "h3")
    # The probe names the host it asks about, after the configurable command.
    assert hosts[0].last_command() == f"{STATUS_COMMAND} --host h1"


def test_transport_is_kept_open_across_rounds(fleet: Fleet, make_probe) -> None:
    probe = make_probe()
    probe.probe_all(fleet.targets())
    first = {name: probe.transport(name) for name in fleet.hosts}
    for _ in range(3):
        assert_healthy(probe.probe_all(fleet.targets()), *fleet.hosts)
    for name in fleet.hosts:
        assert probe.transport(name) is first[name]
        assert probe.connect_count(name) == 1


def test_a_host_no_longer_probed_loses_its_connection(fleet: Fleet, make_probe) -> None:
    """Removed or disabled, a host is left out of the next round: its kept-open session is
    closed then, not when the producer stops."""
    probe = make_probe()
    assert_healthy(probe.probe_all(fleet.targets()), *fleet.hosts)
    kept = probe.transport("h1")
    assert kept is not None and kept.is_active()
    others = [t for t in fleet.targets() if t.name != "h1"]
    assert_healthy(probe.probe_all(others), *(t.name for t in others))
    assert not kept.is_active() and probe.transport("h1") is None
    probe.probe_all([])
    assert all(probe.transport(t.name) is None for t in others)


def test_fresh_mode_connects_every_round(fleet: Fleet, make_probe) -> None:
    probe = make_probe(fresh=True)
    for _ in range(3):
        assert_healthy(probe.probe_all(fleet.targets()), *fleet.hosts)
    assert probe.connect_count("h1") == 3
    assert probe.transport("h1") is None


def test_killed_sshd_is_refused_then_recovers(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    probe = make_probe()
    assert_healthy(probe.probe_all(fleet.targets()), *fleet.hosts)
    hosts[0].stop_sshd()
    results = probe.probe_all(fleet.targets())
    assert "connection refused" in reason(results["h1"])
    assert_healthy(results, "h2", "h3")
    hosts[0].start_sshd()
    probe_until_ok(probe, fleet, "h1", within_s=5.0)
    assert probe.connect_count("h1") == 2


def test_swapped_host_key_is_refused_others_unaffected(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    probe = make_probe()
    assert_healthy(probe.probe_all(fleet.targets()), *fleet.hosts)
    known_hosts_before = fleet.known_hosts.read_text()
    hosts[1].swap_host_key()
    for _ in range(2):  # the kept-open transport dies with sshd; the reconnect is refused
        results = probe.probe_all(fleet.targets())
        assert "host key for h2 changed" in reason(results["h2"])
        assert_healthy(results, "h1", "h3")
    assert fleet.known_hosts.read_text() == known_hosts_before  # never auto-added


def test_unknown_host_is_refused(
    fleet: Fleet, hosts: list[FleetHost], make_probe, tmp_path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    result = make_probe().probe_all([hosts[0].target(known_hosts_file=str(empty))])["h1"]
    assert "host key for h1 unknown" in reason(result)
    assert empty.read_text() == ""


def test_wrong_client_key_fails_authentication(
    fleet: Fleet, hosts: list[FleetHost], make_probe, tmp_path
) -> None:
    key_file = tmp_path / "stranger"  # a key that no host authorizes
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)], check=True)
    result = make_probe().probe_all([hosts[0].target(key_file=str(key_file))])["h1"]
    assert "authentication failed" in reason(result)


# -- the answer: the host's clock, then the document its consumer wrote ------------------------


def test_a_stale_document_fails_its_host_alone(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    hosts[1].serve_status(updated_at=time.time() - 60)  # its consumer stopped a minute ago
    results = make_probe(stale_after_s=15).probe_all(fleet.targets())
    text = reason(results["h2"])
    assert text.startswith("status is ") and text.endswith(" s old: consumer not running?")
    assert_healthy(results, "h1", "h3")


def test_age_is_judged_on_the_hosts_clock(fleet: Fleet, hosts: list[FleetHost], make_probe) -> None:
    """A host whose clock is an hour behind the producer's, with a consumer writing on that
    clock: its document is fresh, not an hour old."""
    hosts[0].serve_status(updated_at=time.time() - 3600)
    hosts[0].set_forced_command(
        f"echo $(( $(date +%s) - 3600 )) && exec cat {hosts[0].status_file}"
    )
    assert_healthy(make_probe(stale_after_s=15).probe_all(fleet.targets()), *fleet.hosts)


def test_an_older_forced_commands_answer_is_still_read(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    """During a rollout the producer is upgraded first: a host still on the Python status
    command prints the document alone (having judged its age itself)."""
    served = hosts[0].serve_status(running=3)
    hosts[0].set_forced_command(f"exec cat {hosts[0].status_file}")
    results = make_probe().probe_all(fleet.targets())
    assert results["h1"] == served
    assert_healthy(results, "h2", "h3")


def _nested(path: Path) -> str:
    path.write_text("[" * 30_000 + "]" * 30_000)
    return "nested too deeply"


def _oversized(path: Path) -> str:
    path.write_text(" " * (4 << 20) + default_status("h1").to_json())
    return "status output larger than"


def _missing(path: Path) -> str:
    path.unlink()
    return "status command exited with 1: cat: "


@pytest.mark.parametrize("poison", [_nested, _oversized, _missing])
def test_a_poisoned_status_file_fails_its_host_alone(
    fleet: Fleet, hosts: list[FleetHost], make_probe, poison: Callable[[Path], str]
) -> None:
    expected = poison(hosts[0].status_file)
    started = time.monotonic()
    results = make_probe(timeout_s=2.0).probe_all(fleet.targets())
    assert expected in reason(results["h1"])
    assert_healthy(results, "h2", "h3")
    assert time.monotonic() - started < 2.0 + MARGIN_S


def _wrong_version() -> str:
    document = json.loads(default_status("h1").to_json()) | {"version": 99}
    return f"echo '{json.dumps(document)}'"


@pytest.mark.parametrize(
    ("shell_body", "expected"),
    [
        ("echo 'this is not json'", "status is not JSON"),
        ("true", "empty status output"),
        (None, "status format version 99, expected 1"),  # None: built by _wrong_version
        ("echo 'no such command' >&2; exit 127", "exited with 127: no such command"),
        ("echo '[1, 2]'", "not a JSON object"),
    ],
)
def test_bad_output_is_a_probe_failure_with_reason(
    fleet: Fleet, hosts: list[FleetHost], make_probe, shell_body: str | None, expected: str
) -> None:
    hosts[0].set_forced_command(shell_body or _wrong_version())
    results = make_probe().probe_all(fleet.targets())
    assert expected in reason(results["h1"])
    assert_healthy(results, "h2", "h3")


def test_status_of_another_host_is_refused(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    hosts[0].serve_status(default_status("h3"))
    assert "status is for host 'h3', not 'h1'" in reason(
        make_probe().probe_all(fleet.targets())["h1"]
    )


def test_hanging_command_times_out_and_others_answer(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    probe = make_probe(timeout_s=1.0)
    hosts[1].set_forced_command("exec sleep 20")
    started = time.monotonic()
    results = probe.probe_all(fleet.targets())
    elapsed = time.monotonic() - started
    assert "timed out after 1.0 s" in reason(results["h2"])
    assert_healthy(results, "h1", "h3")
    assert elapsed < 1.0 + MARGIN_S
    hosts[1].serve_status()
    probe_until_ok(probe, fleet, "h2", within_s=5.0)


def test_busy_pool_never_holds_the_round_past_the_timeout(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    probe = make_probe(timeout_s=1.0, max_workers=1)
    hosts[0].set_forced_command("exec sleep 20")  # holds the only worker the whole round
    started = time.monotonic()
    results = probe.probe_all(fleet.targets())
    assert time.monotonic() - started < 1.0 + MARGIN_S
    assert "timed out after 1.0 s" in reason(results["h1"])
    for name in ("h2", "h3"):
        assert "all probe workers busy" in reason(results[name])


def test_host_that_hangs_after_connect_times_out(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    hosts[2].freeze_sshd()  # TCP connects complete in the kernel; sshd never speaks
    started = time.monotonic()
    results = make_probe(timeout_s=1.0).probe_all(fleet.targets())
    assert time.monotonic() - started < 1.0 + MARGIN_S
    assert "timed out after 1.0 s" in reason(results["h3"])
    assert_healthy(results, "h1", "h2")


def test_unreachable_address_times_out(
    fleet: Fleet, hosts: list[FleetHost], make_probe, tmp_path
) -> None:
    if fleet.mode != "netns":
        pytest.skip("needs the test subnet: an address of it that no host holds")
    nobody = fleet.gateway.rsplit(".", 1)[0] + ".250"
    known_hosts = tmp_path / "known_hosts"  # known, so the failure is the network's
    known_hosts.write_text(f"{nobody} {hosts[0].original_host_public_key}\n")
    target = hosts[0].target(address=nobody, known_hosts_file=str(known_hosts))
    started = time.monotonic()
    result = make_probe(timeout_s=1.0).probe_all([target])["h1"]
    assert time.monotonic() - started < 1.0 + MARGIN_S
    text = reason(result)
    assert "timed out" in text or "unreachable" in text.lower()


# -- least privilege: the producer's key runs the forced command and nothing else -----------


def test_authorized_keys_line_forces_command_without_pty_or_forwarding(hosts: list[FleetHost]):
    line = (hosts[0].dir / "authorized_keys").read_text()
    assert line.startswith(f'command="{hosts[0].forced_command}",')
    for option in ("no-pty", "no-port-forwarding", "no-agent-forwarding", "no-X11-forwarding"):
        assert option in line.split()[0].split(",")


def test_key_asking_for_another_command_gets_only_the_status(
    fleet: Fleet, hosts: list[FleetHost], make_probe
) -> None:
    served = hosts[0].serve_status(running=1)
    result = make_probe(command="cat /etc/passwd").probe_all([hosts[0].target()])["h1"]
    assert result == served
    assert hosts[0].last_command() == "cat /etc/passwd --host h1"  # asked, not run


def _open_transport(fleet: Fleet, host: FleetHost) -> paramiko.Transport:
    probe = SSHProbe()
    try:
        assert isinstance(probe.probe_all([host.target()])[host.name], HostStatus)
        transport = probe.transport(host.name)
        assert transport is not None
        probe._link(host.name).transport = None  # keep it open past probe.close()
        return transport
    finally:
        probe.close()


def test_key_cannot_run_a_shell_command_or_get_a_pty(fleet: Fleet, hosts: list[FleetHost]) -> None:
    served = hosts[0].serve_status()
    transport = _open_transport(fleet, hosts[0])
    try:
        channel = transport.open_session(timeout=3)
        channel.settimeout(3)
        channel.exec_command("id; cat /etc/passwd")
        output = channel.makefile("rb").read()
        answer = parse_status_answer(output)
        assert answer.status == served
        # The host's clock (this machine's: the namespaces share it), to the second.
        assert answer.host_clock is not None and abs(answer.host_clock - time.time()) < 5
        assert b"root:" not in output and b"uid=" not in output
        with pytest.raises(paramiko.SSHException):
            transport.open_session(timeout=3).get_pty()
    finally:
        transport.close()


def test_key_cannot_forward_ports(fleet: Fleet, hosts: list[FleetHost]) -> None:
    transport = _open_transport(fleet, hosts[0])
    try:
        with pytest.raises(paramiko.ChannelException):
            transport.open_channel(
                "direct-tcpip", (hosts[0].address, hosts[0].port), ("127.0.0.1", 0), timeout=3
            )
        with pytest.raises(paramiko.SSHException):
            transport.request_port_forward("127.0.0.1", 0)
    finally:
        transport.close()


# -- the harness itself --------------------------------------------------------------------


def test_harness_cleans_up_after_a_crashed_run(fleet: Fleet) -> None:
    script = (
        "from tests.fleet.harness import Fleet\n"
        "import sys, time\n"
        "fleet = Fleet(mode=sys.argv[1]); fleet.add_hosts(2)\n"
        "print('RUN', fleet.run_id, flush=True)\n"
        "time.sleep(30)\n"
    )
    crashed = subprocess.Popen(
        [sys.executable, "-c", script, fleet.mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert crashed.stdout is not None
        lines = (crashed.stdout.readline() for _ in range(10))
        run_id = next(line.split()[1] for line in lines if line.startswith("RUN "))
        assert harness._marked_pids(run_id), "the crashed run's sshd should be running"
    finally:
        os.kill(crashed.pid, signal.SIGKILL)
        crashed.wait(5)
    with harness._registry_lock():
        harness.cleanup_leftovers()
    prefix = f"{harness.FAMILY}{run_id}"
    assert harness._marked_pids(run_id) == []
    assert not [n for n in harness._our_namespaces() + harness._our_links() if n.startswith(prefix)]
    assert not (harness.REGISTRY / run_id).exists()
    assert fleet.root.exists()  # a live run is left alone
