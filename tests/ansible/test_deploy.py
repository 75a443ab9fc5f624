"""site.yml over real SSH against namespace hosts, then the fleet it built runs jobs.

One deployment per module (tests/ansible/deployment.py); the tests run in file order: the
first run's recap and what its --diff output shows, the rendered units and keys, a batch of
jobs, the second run (changed=0), then a rollout of another version with one host drained.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from tests.ansible.deployment import SECRETS, Deployment, build_wheel, parse_unit

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(900)]

JOB_COUNT = 30
JOBS_DEADLINE_S = 90.0
ROLLOUT_VERSION = "0.1.0.post1"


def test_site_provisions_every_reachable_host(deployment: Deployment) -> None:
    run = deployment.runs[0]
    recap = run.recap()
    for host in (deployment.db, *deployment.consumers):
        assert recap[host.name]["failed"] == 0, run.output[-6000:]
        assert recap[host.name]["unreachable"] == 0, run.output[-6000:]
    # The host whose sshd is down fails alone; the rest of the fleet is provisioned.
    assert recap[deployment.down.name]["unreachable"] == 1, run.output[-6000:]
    # Without systemd as PID 1 the roles say why they did not start the services.
    assert "systemd is not PID 1" in run.output


def test_diff_output_shows_no_secret(deployment: Deployment) -> None:
    run = deployment.runs[0]
    assert "+++ after" in run.output, "the first run was not made with --diff"
    _assert_no_secret(run.output)
    # The files do hold them, readable by the service only; the webhook secret goes to the
    # producer alone (consumers hold no secret of the fleet's).
    producer = tomllib.loads((deployment.db.dir / "etc" / "producer.toml").read_text())
    assert producer["webhook_secret"] == SECRETS[-1]
    assert SECRETS[1] in producer["database_url"]
    for host in deployment.consumers:
        consumer = (host.dir / "etc" / "consumer.toml").read_text()
        assert "webhook_secret" not in consumer and SECRETS[-1] not in consumer
        # Each consumer logs in as its own database role, never with the producer's password.
        assert f"scrapefleet_consumer_{host.name}:" in consumer and SECRETS[1] not in consumer
        assert (host.dir / "etc" / "consumer.toml").stat().st_mode & 0o777 == 0o640


def test_units_pass_systemd_analyze_verify(deployment: Deployment) -> None:
    reboot_units = ["scrapefleet-reboot.path", "scrapefleet-reboot.service"]
    for host, name in [
        (deployment.db, None),
        *[(h, n) for h in deployment.consumers for n in [None, *reboot_units]],
    ]:
        unit = deployment.unit_file(host, name)
        result = subprocess.run(
            ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
        )
        problems = result.stdout + result.stderr
        assert result.returncode == 0, problems
        assert "ignoring" not in problems.lower(), problems  # a setting systemd did not take
        values = parse_unit(unit.read_text())
        if name is None:
            assert values["Restart"] == ["always"]
            assert values["StandardOutput"] == ["journal"]


def test_consumers_are_locked_down(deployment: Deployment) -> None:
    for host in deployment.consumers:
        keys = (host.dir / "home" / ".ssh" / "authorized_keys").read_text()
        (line,) = [k for k in keys.splitlines() if k and not k.startswith("#")]
        status = (
            f"{host.dir / 'venv'}/bin/scrapefleet-consumer status --json --host {host.name}"
            f" --config {host.dir / 'etc' / 'consumer.toml'}"
        )
        # restrict: no pty, forwarding, agent, X11 or ~/.ssh/rc; from=: the producer only.
        expected = f'restrict,from="{deployment.db.address}",command="{status}" ssh-ed25519 '
        assert line.startswith(expected), line
        # No sudo rule any more (an earlier version's is removed): the consumer gains no
        # privilege, ever, and its unit says so.
        assert not (host.dir / "sudoers.d" / "scrapefleet").exists()
        unit = parse_unit(deployment.unit_file(host).read_text())
        assert unit["NoNewPrivileges"] == ["yes"]


def test_deployed_reboot_path_is_allowed(deployment: Deployment) -> None:
    """The consumer's configured reboot_command, run as its service user under the unit's
    environment, makes the request the root-owned path unit watches; the reboot service then
    clears the request and runs the reboot (here a harmless stand-in that counts)."""
    for host in deployment.consumers:
        settings = tomllib.loads((host.dir / "etc" / "consumer.toml").read_text())
        unit = parse_unit(deployment.unit_file(host).read_text())
        path_unit = parse_unit(deployment.unit_file(host, "scrapefleet-reboot.path").read_text())
        service = parse_unit(deployment.unit_file(host, "scrapefleet-reboot.service").read_text())
        (request,) = path_unit["PathExists"]
        assert request.startswith(unit["ReadWritePaths"][0].split()[-1])  # writable by the unit

        asked = host.run(
            ["runuser", "-u", unit["User"][0], "--", "env", "-i", "PATH=/usr/bin:/bin",
             *shlex.split(settings["reboot_command"])]
        )  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        assert Path(request).exists(), "the consumer's request did not reach the path unit"

        # What systemd does when the path triggers: the service's commands, as root.
        for key in ("ExecStartPre", "ExecStart"):
            done = host.run(shlex.split(service[key][0]))
            assert done.returncode == 0, f"{key}: {done.stderr}"
        assert not Path(request).exists(), "a request left behind would reboot again"
        assert (host.dir / "reboots").read_text() == "reboot\n"
        (host.dir / "reboots").unlink()

        # The request directory is made anew at boot (on /run) with the same owner and mode.
        tmpfiles = (host.dir / "tmpfiles.d" / "scrapefleet-reboot.conf").read_text()
        assert f"d {Path(request).parent} 0770 root " in tmpfiles


def test_provisioned_fleet_processes_a_batch(deployment: Deployment) -> None:
    hosts = json.loads(deployment.scrapefleet("status", "--json").stdout)["hosts"]
    assert {h["host"] for h in hosts} == {h.name for h in deployment.consumers}
    services = [deployment.start_service(h) for h in (deployment.db, *deployment.consumers)]
    jobs = deployment.db.dir / "jobs.jsonl"
    jobs.write_text('{"kind": "noop", "payload": {}}\n' * JOB_COUNT)
    submitted = deployment.scrapefleet("submit", str(jobs))
    assert submitted.returncode == 0, submitted.stderr

    deadline = time.monotonic() + JOBS_DEADLINE_S
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in services), _logs(deployment)
        status = deployment.scrapefleet("status", "--json")
        counts = json.loads(status.stdout)["jobs"] if status.returncode == 0 else {}
        if counts.get("completed") == JOB_COUNT:
            break
        time.sleep(0.5)  # poll period, bounded by the deadline
    assert counts.get("completed") == JOB_COUNT, f"{counts}\n{_logs(deployment)}"
    # Both consumers took work: the producer probed them over SSH with the keys it was given.
    per_host = deployment.scrapefleet("status", "--json")
    loads = {h["host"]: h for h in json.loads(per_host.stdout)["hosts"]}
    assert all(loads[h.name]["state"] == "active" for h in deployment.consumers), loads


def test_probe_key_works_from_the_producer_only(deployment: Deployment) -> None:
    """The producer's key, used from the producer's address, gets the status document (the
    consumers run since the batch above); the same key used from another host (a stolen copy
    on a compromised consumer) is refused."""
    target, other = deployment.consumers
    user = parse_unit(deployment.unit_file(target).read_text())["User"][0]
    ssh_dir = deployment.db.dir / "home" / ".ssh"
    argv = ["ssh", "-F", "/dev/null", "-i", str(ssh_dir / "id_ed25519"), "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={ssh_dir / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
            f"{user}@{target.address}", "sh", "-c", "id"]  # fmt: skip
    allowed = deployment.db.run(argv)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["host"] == target.name  # the forced command, not `id`
    refused = other.run(argv)
    assert refused.returncode == 255, refused.stdout + refused.stderr
    assert "Permission denied" in refused.stderr, refused.stderr


def test_second_run_changes_nothing(deployment: Deployment) -> None:
    run = deployment.play("site.yml", "--diff")
    recap = run.recap()
    for host in (deployment.db, *deployment.consumers):
        assert recap[host.name]["failed"] == 0, run.output[-6000:]
        assert recap[host.name]["changed"] == 0, "\n".join(run.changed_tasks())
    _assert_no_secret(run.output)


def test_rollout_restarts_the_producer_and_keeps_a_drained_host_drained(
    deployment: Deployment, tmp_path: Path
) -> None:
    drained, other = deployment.consumers
    done = deployment.scrapefleet("hosts", "drain", drained.name)
    assert done.returncode == 0, done.stderr
    wheel = build_wheel(tmp_path, version=ROLLOUT_VERSION)

    run = deployment.play(
        "rollout.yml", "--diff", "-e", f"scrapefleet_package={wheel}",
        "--limit", f"all:!{deployment.down.name}",  # unreachable: it would stop the rollout
    )  # fmt: skip
    assert run.returncode == 0, run.output[-6000:]
    _assert_no_secret(run.output)
    for host in (deployment.db, *deployment.consumers):
        version = host.run(
            # -I: not the checkout's scrapefleet.egg-info in the current directory
            [str(host.dir / "venv" / "bin" / "python"), "-I", "-c",
             "from importlib.metadata import version; print(version('scrapefleet'))"]
        )  # fmt: skip
        assert version.stdout.strip() == ROLLOUT_VERSION, version.stderr
    # The upgraded producer is restarted (here the handler says why it cannot: no systemd).
    assert "RUNNING HANDLER [producer : Restart scrapefleet-producer]" in run.output
    # The host drained by the operator stays drained; the other goes back to work.
    hosts = json.loads(deployment.scrapefleet("status", "--json").stdout)["hosts"]
    states = {h["host"]: h["state"] for h in hosts}
    assert states == {drained.name: "draining", other.name: "active"}, run.output[-6000:]
    assert f"{drained.name} was draining before the rollout and stays so" in run.output


def _assert_no_secret(output: str) -> None:
    for secret in SECRETS:
        assert secret not in output, f"{secret!r} appears in the playbook output"


def _logs(deployment: Deployment) -> str:
    parts = []
    for host in (deployment.db, *deployment.consumers):
        log = host.dir / "service.log"
        if log.exists():
            parts.append(f"--- {host.name}\n{log.read_text()[-3000:]}")
    return "\n".join(parts)
