"""A PostgreSQL SCRAM-SHA-256 verifier of a password, for `scrapefleet db grant`.

`CREATE ROLE ... PASSWORD '<verifier>'` stores the verifier as it is: the password itself never
reaches the server, its log or pg_stat_activity. The same computation as the Ansible database
role's filter plugin (ansible/roles/database/filter_plugins/scram.py), which runs on a
controller without this package; a unit test holds the two to each other.

The format is PostgreSQL's (src/common/scram-common.c, RFC 5802 and RFC 7677):
    SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>
The password goes through SASLprep (RFC 4013) as PostgreSQL does, and like PostgreSQL the raw
bytes are used when SASLprep refuses it, so whatever password logs in to psql matches.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stringprep
import unicodedata
from typing import Any

ITERATIONS = 4096  # PostgreSQL's default scram_iterations
SALT_BYTES = 16  # as PostgreSQL's own verifiers


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _prohibited(char: str) -> bool:
    return any(
        check(char)
        for check in (
            stringprep.in_table_c12,  # non-ASCII spaces (mapped before this check)
            stringprep.in_table_c21_c22,  # control characters
            stringprep.in_table_c3,  # private use
            stringprep.in_table_c4,  # non-character code points
            stringprep.in_table_c5,  # surrogates
            stringprep.in_table_c6,  # inappropriate for plain text
            stringprep.in_table_c7,  # inappropriate for canonical representation
            stringprep.in_table_c8,  # change display properties, deprecated
            stringprep.in_table_c9,  # tagging characters
            stringprep.in_table_a1,  # unassigned in Unicode 3.2
        )
    )


def saslprep(password: str) -> str | None:
    """RFC 4013's SASLprep of a stored string, or None where PostgreSQL's pg_saslprep fails
    (a prohibited character or a bidirectional rule broken)."""
    mapped = "".join(
        " " if stringprep.in_table_c12(c) else c for c in password if not stringprep.in_table_b1(c)
    )
    normalized = unicodedata.normalize("NFKC", mapped)
    if any(_prohibited(c) for c in normalized):
        return None
    if any(stringprep.in_table_d1(c) for c in normalized):  # right-to-left text
        if any(stringprep.in_table_d2(c) for c in normalized):
            return None
        if not (stringprep.in_table_d1(normalized[0]) and stringprep.in_table_d1(normalized[-1])):
            return None
    return normalized


def scram_sha256_verifier(
    password: Any, salt: str | None = None, iterations: int = ITERATIONS
) -> str:
    """The verifier of ``password``; ``salt`` (base64) only to reproduce a known one in tests:
    by default each call draws a new random salt, as PostgreSQL does."""
    text = str(password)
    prepared = saslprep(text)
    secret = (prepared if prepared is not None else text).encode("utf-8")
    raw_salt = base64.b64decode(salt) if salt is not None else os.urandom(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac("sha256", secret, raw_salt, int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    keys = f"{_b64(stored_key)}:{_b64(server_key)}"
    return f"SCRAM-SHA-256${int(iterations)}:{_b64(raw_salt)}${keys}"
