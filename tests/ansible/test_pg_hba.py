"""The database role's pg_hba blocks rendered as Ansible renders them (its templates and its
filter plugin, without a host): each address admits one host, IPv4 or IPv6, and a host name is
refused naming the host. The deploy test (test_deploy.py) loads the result into PostgreSQL."""

from __future__ import annotations

import importlib.util
from typing import Any

import jinja2
import pytest

from tests.ansible.playbook import ANSIBLE_DIR

ROLE = ANSIBLE_DIR / "roles" / "database"


def _render(template: str, addresses: dict[str, str], by_duty: bool = True) -> list[str]:
    path = ROLE / "filter_plugins" / "pg_hba.py"
    spec = importlib.util.spec_from_file_location("scrapefleet_pg_hba_filter", path)
    assert spec and spec.loader
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,  # as Ansible's template lookup
    )
    env.filters.update(plugin.FilterModule().filters())
    env.filters["bool"] = lambda value: str(value).lower() in ("true", "yes", "1")
    consumers = [h for h in addresses if h != "p1"]
    variables: dict[str, Any] = {
        "groups": {"producer": ["p1"]},
        "hostvars": {h: {"scrapefleet_address": a} for h, a in addresses.items()},
        "scrapefleet_fleet_consumers": consumers,
        "scrapefleet_db_roles_by_duty": by_duty,
        "scrapefleet_db_tls": True,
        "scrapefleet_db_name": "scrapefleet",
        "scrapefleet_db_user": "scrapefleet",
        "scrapefleet_db_role_prefix": "scrapefleet",
    }
    return [line.split()[3] for line in env.get_template(template).render(variables).splitlines()]


@pytest.mark.parametrize("template", ["pg_hba_block.j2", "pg_hba_consumers.j2"])
def test_an_address_admits_one_host_ipv4_or_ipv6(template: str) -> None:
    fleet = {"p1": "10.0.0.1", "c4": "10.0.0.4", "c6": "2001:db8::6", "c7": "2001:DB8:0::7"}
    shown = _render(template, fleet, by_duty=False)
    expected = ["10.0.0.4/32", "2001:db8::6/128", "2001:db8::7/128"]
    assert shown == (["10.0.0.1/32", *expected] if template == "pg_hba_block.j2" else expected)


@pytest.mark.parametrize("template", ["pg_hba_block.j2", "pg_hba_consumers.j2"])
def test_a_host_name_is_refused_naming_the_host(template: str) -> None:
    fleet = {"p1": "10.0.0.1", "c1": "consumer1.example.com"}
    with pytest.raises(Exception, match=r"host 'c1' has address 'consumer1\.example\.com', not an"):
        _render(template, fleet, by_duty=False)
