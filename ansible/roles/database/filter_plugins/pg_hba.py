"""The `pg_hba_address` filter: a fleet host's address as a pg_hba.conf ADDRESS field.

One host exactly: ``/32`` after an IPv4 address, ``/128`` after an IPv6 one. Appending ``/32``
to everything, as the templates once did, let an IPv6 address in as a /32 network (2^96
addresses) and turned a host name into a line PostgreSQL refuses to load. A host name is
refused here, naming the host: pg_hba would match it through reverse DNS, which whoever
controls the consumer network's resolver can answer, so the inventory must give an address.
"""

from __future__ import annotations

import ipaddress
from typing import Any

try:  # under Ansible, an error it reports as the task's failure, without a traceback
    from ansible.errors import AnsibleFilterError as _Refused
except ImportError:  # the template rendered without Ansible (tests/ansible/test_pg_hba.py)
    _Refused = ValueError  # type: ignore[assignment,misc]


def pg_hba_address(address: Any, host: str = "") -> str:
    """``address`` with the prefix length of a single host; ``host`` names it in the error."""
    text = str(address).strip()
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise _Refused(
            f"pg_hba: host {host or text!r} has address {text!r}, not an IP address:"
            " set its scrapefleet_address (or ansible_host) to the IPv4 or IPv6 address"
            " it connects to the database from"
        ) from None
    return f"{ip.compressed}/{ip.max_prefixlen}"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pg_hba_address": pg_hba_address}
