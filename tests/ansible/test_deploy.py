"""site.yml over real SSH against namespace hosts, then the fleet it built runs jobs.

One deployment per module (tests/ansible/deployment.py); the tests run in file order, each
leaving the fleet as the next expects: the first run's recap and what its --diff output shows,
the rendered units and keys, a batch of jobs and the team's package on every consumer, a
rollout of another build with the package's next version (one host drained), a run failing
after a settings change, the drained host removed, site.yml again (changed=0 everywhere, the
rolled-out versions kept), then the removed host added back.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import pwd
import re
import shlex
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import pytest
import yaml

from scrapefleet.common.status.answer import parse_status_answer, status_answer_command
from tests.ansible.deployment import DB_PASSWORD, SECRETS, Deployment, build_wheel
from tests.ansible.playbook import REPO, PlaybookRun
from tests.ansible.service_control import parse_unit
from tests.ansible.team_package import KIND, make_wheel
from tests.fleet.harness import _free_port
from tests.waiting import scaled, wait_for

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(900)]

JOB_COUNT = 30
PIN_FILE = Path("ansible/roles/consumer/files/selenium-server/SHA256SUMS")
JOBS_DEADLINE_S = 90.0
AGENT_UNIT = "scrapefleet-browser-agent.service"


def test_site_provisions_every_reachable_host(deployment: Deployment) -> None:
    run = deployment.runs[0]
    recap = run.recap()
    for host in (deployment.db, *deployment.consumers):
        assert recap[host.name]["failed"] == 0, run.output[-6000:]
        assert recap[host.name]["unreachable"] == 0, run.output[-6000:]
    # The host whose sshd is down fails alone; the rest of the fleet is provisioned.
    assert recap[deployment.down.name]["unreachable"] == 1, run.output[-6000:]
    # systemd is not PID 1 here: the roles started the daemons with the service command.
    assert "systemd is not PID 1" not in run.output
    for host in (deployment.db, *deployment.consumers):
        assert deployment.main_pid(host) is not None, _logs(deployment)
    # verify.yml, run last: each consumer live and its pinned canary job completed.
    for host in deployment.consumers:
        assert f"ok: [{host.name}]" in _task_output(run, "Stop unless the canary job completed")


def test_the_dashboard_runs_on_the_producer_host(deployment: Deployment) -> None:
    """Installed, started and answering on loopback; its settings readable by the service
    only (they hold the database password)."""
    assert deployment.main_pid(deployment.db, "scrapefleet-dashboard.service") is not None
    config = deployment.db.dir / "etc" / "dashboard.toml"
    assert config.stat().st_mode & 0o777 == 0o640
    settings = tomllib.loads(config.read_text())
    assert settings["dashboard_address"] == "127.0.0.1"
    # Secure by default: every page needs the login (the token is required by the role).
    assert settings["dashboard_read_needs_token"] is True and settings["dashboard_token"]
    probe = (
        "import sys, time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        f"        print(urllib.request.urlopen('http://127.0.0.1:{settings['dashboard_port']}"
        "/healthz', timeout=2).read().decode()); sys.exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.2)  # still starting: bounded by the loop\n"
        "sys.exit(1)\n"
    )
    answer = deployment.db.run(["/usr/bin/python3", "-c", probe])
    assert answer.returncode == 0 and answer.stdout.strip() == "ok", _logs(deployment)
    overview = (
        "import http.client\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {settings['dashboard_port']}, timeout=10)\n"
        "c.request('GET', '/')\n"
        "r = c.getresponse()\n"
        "print(r.status, r.getheader('Location'))\n"
    )
    answer = deployment.db.run(["/usr/bin/python3", "-c", overview])
    assert answer.stdout.split()[:1] == ["303"] and "/login" in answer.stdout, answer.stdout


def test_consumers_log_in_as_their_own_role_and_never_as_the_producers(
    deployment: Deployment,
) -> None:
    """Roles by duty are the default: each consumer's settings name its own role, and pg_hba
    lets a consumer's address in as that role only (the producer's role and password are
    refused from there, whoever holds them)."""
    hba = Path(f"/etc/postgresql/15/{deployment.cluster}/pg_hba.conf").read_text()
    lines = [line.split() for line in hba.splitlines() if line and not line.startswith("#")]
    producer_lines = [f for f in lines if len(f) > 3 and f[2] == "scrapefleet"]
    assert producer_lines, hba
    for host in deployment.consumers:
        url = tomllib.loads((host.dir / "etc" / "consumer.toml").read_text())["database_url"]
        role = url.split("://", 1)[1].split(":", 1)[0]
        assert role.startswith("scrapefleet_consumer_"), url
        assert quote(DB_PASSWORD, safe="") not in url
        assert not [f for f in producer_lines if f[3] == f"{host.address}/32"], producer_lines
        as_producer = re.sub(r"://[^@]*@", f"://scrapefleet:{quote(DB_PASSWORD, safe='')}@", url)
        refused = host.run(["psql", "-XAtc", "SELECT 1", as_producer])
        assert refused.returncode != 0 and "no pg_hba.conf entry" in refused.stderr, (
            refused.stdout + refused.stderr
        )


def test_hosts_install_offline_from_the_wheelhouse(deployment: Deployment) -> None:
    """pip ran with --no-index from the copied wheelhouse on every host (the namespaces have no
    route out, so nothing could have come from a registry) and pgserver is not installed."""
    run = deployment.runs[0]
    installed = _task_output(run, "Say where the package came from")
    for host in (deployment.db, *deployment.consumers):
        assert f"ok: [{host.name}]" in installed, installed
        pip = host.run([str(host.dir / "venv" / "bin" / "pip"), "list", "--format=freeze"])
        assert pip.returncode == 0, pip.stderr
        assert "scrapefleet==" in pip.stdout and "pgserver" not in pip.stdout, pip.stdout
    assert "offline (pip --no-index)" in installed, installed


def test_the_fleet_talks_to_the_database_over_tls_only(deployment: Deployment) -> None:
    """Every daemon's URL says sslmode=verify-full against the CA the role installed, their
    connections are TLS (pg_stat_ssl), and a plain connection from a fleet host is refused."""
    for host in deployment.consumers:
        url = tomllib.loads((host.dir / "etc" / "consumer.toml").read_text())["database_url"]
        ca = host.dir / "etc" / "database-ca.crt"
        assert url.endswith(f"?sslmode=verify-full&sslrootcert={quote(str(ca))}"), url
        assert ca.read_text().startswith("-----BEGIN CERTIFICATE-----")
    wait_for(
        lambda: _admin_sql(deployment, _FLEET_SSL_SQL) or None, scaled(30), "fleet connections"
    )
    assert _admin_sql(deployment, _FLEET_SSL_SQL) == "t", "a fleet connection without TLS"
    host = deployment.consumers[0]
    url = tomllib.loads((host.dir / "etc" / "consumer.toml").read_text())["database_url"]
    checked = host.run(
        ["psql", "-XAtc", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", url]
    )
    assert checked.returncode == 0 and checked.stdout.strip() == "t", checked.stderr
    plain = host.run(
        ["psql", "-XAtc", "SELECT 1", url.replace("sslmode=verify-full", "sslmode=disable")]
    )
    assert plain.returncode != 0 and "no encryption" in plain.stderr, plain.stderr


# Whether every client connection to the fleet's database is TLS ("" when there is none yet).
_FLEET_SSL_SQL = (
    "SELECT bool_and(s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)"
    " WHERE a.datname = 'scrapefleet' AND a.client_addr IS NOT NULL"
)


def _admin_sql(deployment: Deployment, sql: str, database: str = "scrapefleet") -> str:
    """One value, as the database host's postgres superuser reads it over the local socket."""
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-p", str(deployment.db_port), "-d", database,
         "-XAtc", sql],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_consumers_get_the_pinned_jar_from_the_control_node(deployment: Deployment) -> None:
    """The jar was copied from the control node and checked on both ends: the host's copy has
    the pinned sha256 and the consumer's settings name it."""
    digest, name = (REPO / PIN_FILE).read_text().split()
    for host in deployment.consumers:
        jar = host.dir / "selenium-server" / name
        assert hashlib.sha256(jar.read_bytes()).hexdigest() == digest
        consumer = tomllib.loads((host.dir / "etc" / "consumer.toml").read_text())
        assert consumer["grid_jar"] == str(jar)


def test_the_firewall_lets_the_fleet_in_and_no_one_else(deployment: Deployment) -> None:
    """The fleet's own nftables table on each host: PostgreSQL, SSH and the metrics endpoints
    answer the fleet's hosts and not a machine on the same network outside the inventory."""
    outsider = deployment.fleet.add_host("outsider")  # on the bridge, in no inventory group
    consumer, db = deployment.consumers[0], deployment.db
    consumer_metrics = deployment.consumer_metrics_port
    assert _reaches(consumer, db.address, deployment.db_port)
    assert not _reaches(outsider, db.address, deployment.db_port)
    assert _reaches(db, consumer.address, 22) and not _reaches(outsider, consumer.address, 22)
    wait_for(lambda: _reaches(db, consumer.address, consumer_metrics), scaled(30), "metrics")
    assert not _reaches(outsider, consumer.address, consumer_metrics)
    tables = {h: h.run(["nft", "list", "table", "inet", "scrapefleet"]) for h in (db, consumer)}
    assert all(t.returncode == 0 and "set fleet4" in t.stdout for t in tables.values()), tables
    assert f"tcp dport {deployment.db_port} ip saddr != @fleet4 drop" in tables[db].stdout


def _reaches(host: Any, address: str, port: int) -> bool:
    """Whether a TCP connection from inside ``host`` to address:port is accepted (a dropped
    SYN times out after 2 s)."""
    probe = (
        "import socket, sys\n"
        f"s = socket.create_connection(({address!r}, {port}), timeout=2)\n"
        "s.close()\n"
    )
    return host.run(["/usr/bin/python3", "-c", probe], timeout=30).returncode == 0


def test_metrics_endpoints_answer_and_prometheus_gets_their_targets(
    deployment: Deployment, tmp_path: Path
) -> None:
    out = tmp_path / "scrape.yml"
    run = deployment.play("prometheus-targets.yml", "-e", f"scrapefleet_prometheus_out={out}")
    assert run.returncode == 0, run.output[-3000:]
    jobs = {j["job_name"]: j for j in yaml.safe_load(out.read_text())["scrape_configs"]}
    producer_targets = jobs["scrapefleet-producer"]["static_configs"][0]["targets"]
    consumer_targets = jobs["scrapefleet-consumer"]["static_configs"][0]["targets"]
    assert producer_targets == [f"{deployment.db.address}:{deployment.producer_metrics_port}"]
    assert f"{deployment.consumers[0].address}:{deployment.consumer_metrics_port}" in (
        consumer_targets
    )
    fetch = (
        "import sys, urllib.request\n"
        "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
    )
    for target, series in (
        (producer_targets[0], "scrapefleet_producer_up"),
        (
            f"{deployment.consumers[0].address}:{deployment.consumer_metrics_port}",
            "scrapefleet_job",
        ),
    ):
        answer = deployment.db.run(["/usr/bin/python3", "-c", fetch, f"http://{target}/metrics"])
        assert answer.returncode == 0 and series in answer.stdout, (target, answer.stderr[-500:])


def test_the_nightly_backup_dumps_restores_and_keeps_the_newest(deployment: Deployment) -> None:
    db, backups = deployment.db, deployment.db.dir / "backups"
    keep = deployment.backup_keep
    # Older dumps than today's, more than the retention keeps.
    for day in range(1, keep + 2):
        old = backups / f"scrapefleet-202601{day:02d}T031500Z.dump"
        old.write_bytes(b"old")
    script = db.dir / "scrapefleet-backup"
    done = db.run([str(script)], timeout=120)
    assert done.returncode == 0, done.stderr
    dumps = sorted(p.name for p in backups.glob("scrapefleet-*.dump"))
    assert len(dumps) == keep and not any(backups.glob("*.partial"))
    newest = backups / dumps[-1]
    assert newest.name in done.stdout
    # Restored into a new database, it holds the same jobs.
    restored = f"restored_{deployment.fleet.run_id}"
    port = str(deployment.db_port)
    admin = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*admin, "createdb", "-p", port, restored], check=True, timeout=60)
    try:
        back = subprocess.run(
            [*admin, "pg_restore", "-p", port, "--no-owner", "--exit-on-error", "-d", restored,
             str(newest)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert back.returncode == 0, back.stderr[-2000:]
        count = "SELECT count(*) FROM jobs"
        assert _admin_sql(deployment, count, restored) == _admin_sql(deployment, count)
    finally:
        subprocess.run([*admin, "dropdb", "-p", port, restored], timeout=60)
    unit = parse_unit(deployment.unit_file(db, "scrapefleet-backup.timer").read_text())
    assert unit["OnCalendar"] == ["*-*-* 03:15:00"] and unit["Persistent"] == ["true"]


def test_hosts_keep_time_a_bounded_journal_and_security_upgrades(deployment: Deployment) -> None:
    for host in (deployment.db, *deployment.consumers):
        journal = configparser.ConfigParser()
        journal.read_string((host.dir / "journald.conf.d" / "scrapefleet.conf").read_text())
        assert journal["Journal"]["SystemMaxUse"] and journal["Journal"]["SystemKeepFree"]
        timesync = configparser.ConfigParser()
        timesync.read_string((host.dir / "timesyncd.conf.d" / "scrapefleet.conf").read_text())
        assert "Time" in timesync
        apt = (host.dir / "apt.conf.d" / "52scrapefleet-unattended-upgrades").read_text()
        assert 'APT::Periodic::Unattended-Upgrade "1";' in apt
        assert "label=Debian-Security" in apt and 'Automatic-Reboot "false"' in apt


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
        (deployment.db, "scrapefleet-dashboard.service"),
        *[(h, n) for h in deployment.consumers for n in [None, AGENT_UNIT, *reboot_units]],
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
        # The role's line is the product's own answer (common.status.answer), to the byte.
        status = status_answer_command(host.dir / "state" / "hosts" / host.name / "status.json")
        # restrict: no pty, forwarding, agent, X11 or ~/.ssh/rc; from=: the producer only.
        expected = f'restrict,from="{deployment.db.address}",command="{status}" ssh-ed25519 '
        assert line.startswith(expected), line
        # No sudo rule any more (an earlier version's is removed): the consumer gains no
        # privilege, ever, and its unit says so.
        assert not (host.dir / "sudoers.d" / "scrapefleet").exists()
        unit = parse_unit(deployment.unit_file(host).read_text())
        assert unit["NoNewPrivileges"] == ["yes"]
        hardening = ("ProtectHome", "ProtectKernelLogs", "RestrictSUIDSGID", "ProtectHostname")
        assert {k: unit.get(k) for k in hardening} == {key: ["yes"] for key in hardening}


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
    before = json.loads(deployment.scrapefleet("status", "--json").stdout)["jobs"]
    expected = before.get("completed", 0) + JOB_COUNT  # verify.yml's canaries completed too
    jobs = deployment.db.dir / "jobs.jsonl"
    jobs.write_text('{"kind": "noop", "payload": {}}\n' * JOB_COUNT)
    submitted = deployment.scrapefleet("submit", str(jobs))
    assert submitted.returncode == 0, submitted.stderr

    deadline = time.monotonic() + JOBS_DEADLINE_S
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        status = deployment.scrapefleet("status", "--json")
        counts = json.loads(status.stdout)["jobs"] if status.returncode == 0 else {}
        if counts.get("completed") == expected:
            break
        time.sleep(0.5)  # poll period, bounded by the deadline
    assert counts.get("completed") == expected, f"{counts}\n{_logs(deployment)}"
    # Both consumers took work: the producer probed them over SSH with the keys it was given.
    per_host = deployment.scrapefleet("status", "--json")
    loads = {h["host"]: h for h in json.loads(per_host.stdout)["hosts"]}
    assert all(loads[h.name]["state"] == "active" for h in deployment.consumers), loads


def test_a_team_package_runs_on_every_consumer(deployment: Deployment) -> None:
    """site.yml shipped the team's package (scrapefleet_extra_packages) to every host: its kind
    is accepted at submit on the producer host and a job of it, pinned to each consumer,
    completes there with the package's own result."""
    jobs = {h.name: _submit_pinned(deployment, h, {"kind": KIND, "payload": {}})
            for h in deployment.consumers}  # fmt: skip
    for host in deployment.consumers:
        shown = _wait_finished(deployment, jobs[host.name])
        assert _field(shown, "status") == "completed", shown
        assert _field(shown, "host") == host.name, shown
        assert json.loads(_field(shown, "result")) == {"greeting": "hello"}, shown


def _submit_pinned(deployment: Deployment, host: Any, job: dict[str, Any]) -> str:
    """One job pinned to ``host`` (submit --host); its id."""
    path = deployment.db.dir / f"job-{host.name}.jsonl"
    path.write_text(json.dumps(job) + "\n")
    submitted = deployment.scrapefleet("submit", "--host", host.name, str(path))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    return str(submitted.stdout.strip().splitlines()[-1].split(": ")[-1])


def _wait_finished(deployment: Deployment, job_id: str, timeout: float = 120.0) -> str:
    """`jobs show` of the job once it completed or failed."""

    def finished() -> str | None:
        shown = str(deployment.scrapefleet("jobs", "show", job_id).stdout)
        return shown if _field(shown, "status") in ("completed", "failed") else None

    return wait_for(finished, scaled(timeout), f"job {job_id}")


def _field(shown: str, name: str) -> str:
    """One field of `jobs show` output ("" when absent)."""
    found = re.search(rf"(?m)^\s*{name}: (.*?)\s*$", shown)
    return found[1] if found else ""


def test_the_browser_runs_as_its_own_user_sandboxed(deployment: Deployment) -> None:
    """A browser job on a deployed consumer: its stack (Xvfb, the Grid, Chromium) runs as the
    role's browser user, not as the consumer's (which holds the settings), with the sandbox on,
    started by the browser agent; the consumer holds no capability at all."""
    host = deployment.consumers[0]
    site = host.dir / "site"
    site.mkdir()
    (site / "index.html").write_text("<title>inside the fleet</title><p>hello</p>")
    site.chmod(0o755)
    port = 8765  # inside the host's own namespace: nothing else listens there
    host.popen(["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", str(port),
                "--directory", str(site)])  # fmt: skip
    job = deployment.db.dir / "browser-job.jsonl"
    url = f"http://127.0.0.1:{port}/index.html"
    job.write_text(json.dumps({"kind": "fetch_page", "payload": {"url": url}}) + "\n")
    submitted = deployment.scrapefleet("submit", "--host", host.name, str(job))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[-1].split(": ")[-1]

    def finished() -> str | None:
        shown = deployment.scrapefleet("jobs", "show", job_id).stdout
        found = re.search(r"(?m)^\s*status: (\w+)\s*$", shown)
        return found[1] if found and found[1] in ("completed", "failed") else None

    status = wait_for(finished, scaled(120), f"browser job {job_id}")
    assert status == "completed", deployment.scrapefleet("jobs", "show", job_id).stdout
    browser_user = f"{pwd.getpwnam(_service_user(host)).pw_name}-browser"
    browser_uid = pwd.getpwnam(browser_user).pw_uid
    # Copies: process_iter reuses its Process objects, and a later call replaces their info.
    stack = [dict(p.info) for p in psutil.process_iter(["uids", "name", "cmdline", "ppid"])
             if p.info["uids"] and p.info["uids"].real == browser_uid]  # fmt: skip
    names = {p["name"] for p in stack}
    assert "Xvfb" in names and "java" in names, names
    consumer_uid = pwd.getpwnam(_service_user(host)).pw_uid
    chromium_as_consumer = [
        p.pid for p in psutil.process_iter(["uids", "name"])
        if p.info["name"].startswith("chrom") and p.info["uids"].real == consumer_uid
    ]  # fmt: skip
    assert not chromium_as_consumer
    # The browser agent started them, as the browser user: Xvfb and the Grid are its children.
    agent_pid = deployment.main_pid(host, AGENT_UNIT)
    assert agent_pid is not None, _logs(deployment)
    assert psutil.Process(agent_pid).uids().real == browser_uid
    started = {p["name"] for p in stack if p["ppid"] == agent_pid}
    assert {"Xvfb", "java"} <= started, started
    # The consumer holds no capability, in its unit or in its running process; neither does the
    # agent.
    unit = parse_unit(deployment.unit_file(host).read_text())
    assert unit["AmbientCapabilities"] == [""] and unit["CapabilityBoundingSet"] == [""]
    agent_unit = parse_unit(deployment.unit_file(host, AGENT_UNIT).read_text())
    assert agent_unit["User"] == [browser_user]
    assert agent_unit["CapabilityBoundingSet"] == [""] and agent_unit["NoNewPrivileges"] == ["yes"]
    for pid in (deployment.main_pid(host), agent_pid):
        assert pid is not None
        caps = _capabilities(pid)
        assert caps == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0}, (pid, caps)


def _capabilities(pid: int) -> dict[str, int]:
    """The capability sets a running process holds or passes on (the bounding set only limits
    what it could gain: the unit's CapabilityBoundingSet=, which the test hosts' stand-in for
    systemd does not apply, is checked in the unit file)."""
    held = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            held[name] = int(value.strip(), 16)
    return held


def _service_user(host: Any) -> str:
    settings = host.dir / "systemd" / "scrapefleet-consumer.service"
    return parse_unit(settings.read_text())["User"][0]


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
    # The forced command (the host's clock, then its document), not `id`.
    answer = parse_status_answer(allowed.stdout.encode())
    assert answer.status.host == target.name and answer.host_clock is not None
    refused = other.run(argv)
    assert refused.returncode == 255, refused.stdout + refused.stderr
    assert "Permission denied" in refused.stderr, refused.stderr


def test_the_database_role_leaves_a_cluster_it_did_not_create_alone(
    deployment: Deployment,
) -> None:
    """Pointed at a cluster someone else made, the role stops before touching it: its files
    are byte for byte as they were and it is still down."""
    name = f"sfx{deployment.fleet.run_id}"
    conf_dir = Path(f"/etc/postgresql/15/{name}")
    created = subprocess.run(
        ["pg_createcluster", "15", name, "--port", str(_free_port())],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    try:
        before = {p: p.read_bytes() for p in sorted(conf_dir.rglob("*")) if p.is_file()}
        run = deployment.play(
            "playbooks/database.yml", "-e", f"scrapefleet_pg_cluster={name}",
            "--limit", deployment.db.name,
        )  # fmt: skip
        assert run.returncode != 0
        assert f"cluster 15/{name} exists and was not created by scrapefleet" in run.output
        after = {p: p.read_bytes() for p in sorted(conf_dir.rglob("*")) if p.is_file()}
        assert after == before
        state = subprocess.run(
            ["pg_lsclusters", "--no-header", "15", name], capture_output=True, text=True, timeout=60
        )
        assert " down " in state.stdout, state.stdout
    finally:
        subprocess.run(["pg_dropcluster", "15", name], capture_output=True, timeout=120)
    # The fleet's own cluster was created and marked by the role.
    assert Path(f"/etc/postgresql/15/{deployment.cluster}/scrapefleet-created").exists()


def test_verify_fails_naming_a_consumer_whose_daemon_is_stopped(deployment: Deployment) -> None:
    stopped, running = deployment.consumers
    assert deployment.service(stopped, "stopped").returncode == 0
    try:
        run = deployment.play(
            "verify.yml", "-e", "scrapefleet_live_timeout_s=4",
            "--limit", f"all:!{deployment.down.name}",
        )  # fmt: skip
    finally:
        assert deployment.service(stopped, "started").returncode == 0, _logs(deployment)
    assert run.returncode != 0
    recap = run.recap()
    assert recap[stopped.name]["failed"] == 1, run.output[-6000:]
    assert recap[running.name]["failed"] == 0, run.output[-6000:]
    assert f"{stopped.name}: its consumer did not report live within 4 s" in run.output


def test_rollout_of_a_rebuilt_wheel_runs_its_code_and_keeps_a_drained_host_drained(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The same version rebuilt (a marker in its code): installed by content, every daemon
    restarted on it; the host an operator drained stays drained, the other is back at work
    after its canary job."""
    drained, other = deployment.consumers
    done = deployment.scrapefleet("hosts", "drain", drained.name)
    assert done.returncode == 0, done.stderr
    hosts = (deployment.db, *deployment.consumers)
    pids_before = {h.name: deployment.main_pid(h) for h in hosts}
    marker = f"rollout-{deployment.fleet.run_id}"
    wheel = build_wheel(tmp_path, marker=marker)
    assert wheel.name == deployment.wheel.name  # the same version: pip alone would skip it
    # The team's package goes from 1.0 to 2.0 in the same rollout.
    team = make_wheel(tmp_path / "team-2.0", "2.0", "bonjour")
    rolled = {"scrapefleet_package": str(wheel), "scrapefleet_extra_packages": [str(team)]}
    run = deployment.play(
        "rollout.yml", "--diff", "-e", json.dumps(rolled),
        "--limit", f"all:!{deployment.down.name}",  # unreachable: it would stop the rollout
    )  # fmt: skip
    assert run.returncode == 0, run.output[-6000:]
    _assert_no_secret(run.output)
    for host in hosts:
        pid = deployment.main_pid(host)
        assert pid is not None and pid != pids_before[host.name], (host.name, run.output[-3000:])
        # The running daemon imported the rebuilt wheel's code.
        code_marker = host.dir / "home" / f"code-marker.{pid}"
        assert code_marker.exists() and code_marker.read_text() == marker, host.name
    # The host drained by the operator stays drained; the other goes back to work.
    hosts_now = json.loads(deployment.scrapefleet("status", "--json").stdout)["hosts"]
    states = {h["host"]: h["state"] for h in hosts_now}
    assert states == {drained.name: "draining", other.name: "active"}, run.output[-6000:]
    assert f"{drained.name} was draining before the rollout and stays so" in run.output
    canaries = _task_output(run, "Stop unless the canary job completed")
    assert f"ok: [{other.name}]" in canaries and drained.name not in canaries, canaries
    # Every consumer reports the team package's new version, and the one at work runs its code.
    reported = _task_output(run, "Say which packages' actions the consumer runs")
    for host in deployment.consumers:
        assert f"{host.name} runs actions of: team-hello 2.0" in reported, reported
        assert _venv_version(host, "team-hello") == "2.0"
    job_id = _submit_pinned(deployment, other, {"kind": KIND, "payload": {}})
    shown = _wait_finished(deployment, job_id)
    assert json.loads(_field(shown, "result")) == {"greeting": "bonjour"}, shown


def _venv_version(host: Any, distribution: str) -> str:
    """The version of a distribution the host's virtualenv holds."""
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    done = host.run([str(host.dir / "venv" / "bin" / "python"), "-I", "-c", code])
    assert done.returncode == 0, done.stderr
    return str(done.stdout.strip())


def test_a_run_that_fails_after_a_settings_change_still_restarts_the_consumer(
    deployment: Deployment,
) -> None:
    """A setting changed in the inventory, then a run that fails on that host after writing
    it (the host key cannot be read): the consumer still restarts on the new settings
    (force_handlers), so the next run, finding nothing to change, leaves it right
    (test_site_after_a_rollout_and_a_removal_changes_nothing checks that run)."""
    host = deployment.consumers[1]  # at work since the rollout
    deployment.set_host_var(host, "scrapefleet_consumer_poll_s", 0.9)
    run = deployment.play(
        "playbooks/consumers.yml", "--limit", f"{deployment.db.name},{host.name}",
        "-e", "scrapefleet_ssh_host_key_file=/nonexistent/ssh_host_ed25519_key.pub",
    )  # fmt: skip
    assert run.returncode != 0 and run.recap()[host.name]["failed"] == 1, run.output[-6000:]
    failed = _task_output(run, "Read this host's public SSH host key")
    assert f"fatal: [{host.name}]" in failed, run.output[-6000:]
    _assert_runs_its_settings(deployment, host)


def _assert_runs_its_settings(deployment: Deployment, host: Any) -> None:
    """The consumer's settings say consumer_poll_s = 0.9, and its daemon started after they
    were last written."""
    config = host.dir / "etc" / "consumer.toml"
    assert tomllib.loads(config.read_text())["consumer_poll_s"] == 0.9
    pid = deployment.main_pid(host)
    assert pid is not None, _logs(deployment)
    started = psutil.Process(pid).create_time()
    assert started >= config.stat().st_mtime, "the consumer runs the settings it had before"


def test_remove_consumer_leaves_nothing(deployment: Deployment) -> None:
    """The drained host is removed: nothing the roles made is left on it (units, settings, CA,
    package, probe key, sudo rule, users, directories, firewall table and its include, drop-ins),
    and its address is nowhere else: pg_hba, its database role, the producer's known_hosts,
    every other host's firewall sets; the fleet forgets it."""
    gone, kept = deployment.consumers
    user = _service_user(gone)
    # An earlier version's sudo rule, to be removed too.
    (gone.dir / "sudoers.d" / "scrapefleet").write_text("x ALL=(root) NOPASSWD: x\n")
    run = deployment.play(
        "remove-consumer.yml", "-e", f"consumer={gone.name}",
        "--limit", f"all:!{deployment.down.name}",  # unreachable: it gets the change later
    )  # fmt: skip
    assert run.returncode == 0, run.output[-6000:]
    assert deployment.main_pid(gone) is None
    for path in [
        deployment.unit_file(gone),
        deployment.unit_file(gone, AGENT_UNIT),
        gone.dir / "browser",  # the agent's stacks and profiles
        deployment.unit_file(gone, "scrapefleet-reboot.path"),
        deployment.unit_file(gone, "scrapefleet-reboot.service"),
        gone.dir / "tmpfiles.d" / "scrapefleet-reboot.conf",
        gone.dir / "home",
        gone.dir / "sudoers.d" / "scrapefleet",
        gone.dir / "etc",  # consumer.toml and database-ca.crt
        gone.dir / "state",
        gone.dir / "artifacts",
        gone.dir / "venv",
        gone.dir / "packages",
        gone.dir / "selenium-server",
        gone.dir / "nftables.d" / "scrapefleet.nft",
        gone.dir / "timesyncd.conf.d" / "scrapefleet.conf",
        gone.dir / "journald.conf.d" / "scrapefleet.conf",
        gone.dir / "apt.conf.d" / "52scrapefleet-unattended-upgrades",
    ]:
        assert not path.exists(), path
    assert "scrapefleet" not in (gone.dir / "nftables.conf").read_text()
    assert gone.run(["nft", "list", "table", "inet", "scrapefleet"]).returncode != 0
    for name in (user, f"{user}-browser"):
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
    known_hosts = (deployment.db.dir / "home" / ".ssh" / "known_hosts").read_text()
    assert gone.address not in known_hosts and kept.address in known_hosts
    hba = Path(f"/etc/postgresql/15/{deployment.cluster}/pg_hba.conf").read_text()
    assert f" {gone.address}/32" not in hba and f" {kept.address}/32" in hba
    for other in (deployment.db, kept):
        table = other.run(["nft", "list", "table", "inet", "scrapefleet"])
        assert table.returncode == 0 and kept.address in table.stdout, table.stderr
        assert gone.address not in table.stdout, (other.name, table.stdout)
    assert not _reaches(gone, deployment.db.address, deployment.db_port)
    roles = subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-p", str(deployment.db_port), "-XAtc",
         "SELECT rolname FROM pg_roles WHERE rolname LIKE 'scrapefleet_consumer_%'"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    dropped = _task_output(run, "Say what became of the host's database role")
    assert f"dropped scrapefleet_consumer_{gone.name}" in dropped, dropped
    # The unreachable host's role stays: it is still in the inventory's consumers.
    left = {f"scrapefleet_consumer_{h.name}" for h in (kept, deployment.down)}
    assert set(roles.stdout.split()) == left, (roles.stdout, dropped)
    hosts = json.loads(deployment.scrapefleet("status", "--json").stdout)["hosts"]
    assert [h["host"] for h in hosts] == [kept.name]


def test_site_after_a_rollout_and_a_removal_changes_nothing(deployment: Deployment) -> None:
    """site.yml again, with the removed host still in the inventory: it is skipped, and nothing
    changes anywhere else. The consumer keeps what rollout.yml installed (scrapefleet rebuilt,
    team-hello 2.0) rather than the inventory's older wheels, without a restart, and the
    settings of the run that failed (above) are the ones its daemon runs."""
    gone, kept = deployment.consumers
    pid = deployment.main_pid(kept)
    run = deployment.play("site.yml", "--diff", "--limit", f"all:!{deployment.down.name}")
    assert run.returncode == 0, run.output[-6000:]
    recap = run.recap()
    for host in (deployment.db, kept, gone):
        assert recap[host.name]["changed"] == 0, "\n".join(run.changed_tasks())
    _assert_no_secret(run.output)
    assert f"WARNING: {gone.name} was removed from the fleet" in run.output
    assert not deployment.unit_file(gone).exists() and not (gone.dir / "venv").exists()
    assert f"WARNING: {kept.name} keeps scrapefleet" in run.output, run.output[-6000:]
    assert deployment.main_pid(kept) == pid
    marker = (kept.dir / "home" / f"code-marker.{pid}").read_text()
    assert marker == f"rollout-{deployment.fleet.run_id}"
    assert _venv_version(kept, "team-hello") == "2.0"
    _assert_runs_its_settings(deployment, kept)


def test_add_consumer_admits_the_host_and_proves_it_with_a_canary(deployment: Deployment) -> None:
    """The removed host comes back with add-consumer.yml, the firewall on: the database host's
    set admits its address again before its consumer starts, and its canary job completes on
    it."""
    back = deployment.consumers[0]
    run = deployment.play("add-consumer.yml", "-e", f"consumer={back.name}")
    assert run.returncode == 0, run.output[-6000:]
    table = deployment.db.run(["nft", "list", "table", "inet", "scrapefleet"])
    assert back.address in table.stdout, table.stdout
    assert _reaches(back, deployment.db.address, deployment.db_port)
    canaries = _task_output(run, "Stop unless the canary job completed")
    assert f"ok: [{back.name}]" in canaries, run.output[-6000:]
    hosts = json.loads(deployment.scrapefleet("status", "--json").stdout)["hosts"]
    assert {h["host"]: h["state"] for h in hosts}[back.name] == "active"


def test_an_older_scrapefleet_is_refused_naming_the_host(
    deployment: Deployment, tmp_path: Path
) -> None:
    """A wheel older than the scrapefleet a host runs stops the run there, before anything is
    copied or installed, unless asked for (scrapefleet_allow_downgrade). The host added back
    above runs the inventory's wheel (a host running a rollout's keeps it instead:
    test_site_after_a_rollout_and_a_removal_changes_nothing)."""
    host = deployment.consumers[0]
    older = build_wheel(tmp_path, version="0.0.1")
    run = deployment.play(
        "playbooks/consumers.yml", "--limit", f"{deployment.db.name},{host.name}",
        "-e", f"scrapefleet_package={older}",
    )  # fmt: skip
    recap = run.recap().get(host.name, {})
    assert run.returncode != 0 and recap.get("changed") == 0, run.output[-6000:]
    assert f"{older.name} would downgrade it" in run.output, run.output[-6000:]
    assert not (host.dir / "packages" / older.name).exists()


def _assert_no_secret(output: str) -> None:
    for secret in SECRETS:
        assert secret not in output, f"{secret!r} appears in the playbook output"


def _logs(deployment: Deployment) -> str:
    parts = []
    for host in (deployment.db, *deployment.consumers):
        for log in sorted((host.dir / "systemd").glob("*.log")):
            parts.append(f"--- {host.name} {log.name}\n{log.read_text()[-3000:]}")
    return "\n".join(parts)


def _task_output(run: PlaybookRun, task: str) -> str:
    """The lines a task printed (every run of it), up to the next task's header."""
    parts = run.output.split("\nTASK [")
    return "\n".join(part for part in parts if task in part.split("]", 1)[0])
