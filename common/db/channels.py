"""The LISTEN/NOTIFY channels: the one a host's consumer is woken on, one per host, and the
producer's, whose names carry the fleet's key.

On one shared channel every consumer received, and looked at, every other host's assignment:
work for each consumer and for PostgreSQL (which delivers each NOTIFY to every listening
session) that grows with the square of the fleet. A channel name is an identifier of at most 63
bytes and a host name may be longer, so the channel carries a digest of it; the payload is the
host's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg


def host_channels(conn: psycopg.Connection[Any], hosts: Sequence[str]) -> list[str]:
    """The channel each host's consumer is woken on, as the database names it: a digest of the
    fleet's key and the host's name (``host_channel``, migration 0031), so that no consumer's
    role can name, and wake, another host's. A consumer's role learns its own host's only."""
    names = []
    for host in hosts:
        name = conn.execute("SELECT host_channel(%s)", (host,)).fetchone()
        names.append(str(name[0]) if name is not None else host)
    return names


def keyed_channels(conn: psycopg.Connection[Any], bases: Sequence[str]) -> list[str]:
    """The producer's channels (common.constants.CHANNEL_SUBMITTED, _FINISHED, _WEBHOOKS_DUE)
    as the database names them: with the key a consumer's role cannot read (migration 0031),
    so that no role but the producer's and the owner's can NOTIFY them. Asked for at every
    LISTEN (common.db.engines.Listener's ``resolve``)."""
    names = []
    for base in bases:
        name = conn.execute("SELECT fleet_channel(%s)", (base,)).fetchone()
        names.append(str(name[0]) if name is not None else base)
    return names
