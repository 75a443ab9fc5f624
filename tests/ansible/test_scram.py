"""The database role's filter plugin: the SCRAM-SHA-256 verifier sent instead of the password.

Checked against RFC 7677's exchange (user "user", password "pencil"): a server holding only our
verifier accepts the RFC's client proof and answers with the RFC's server signature. The
deploy test (test_deploy.py) then logs in to a real PostgreSQL with the password it set."""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import re
from types import ModuleType

from tests.ansible.playbook import ANSIBLE_DIR

RFC7677_SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="
RFC7677_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_AUTH_MESSAGE = (
    "n=user,r=rOprNGfwEbeRWgbNEkqO,"
    f"r={RFC7677_NONCE},s={RFC7677_SALT},i=4096,"
    f"c=biws,r={RFC7677_NONCE}"
).encode()
RFC7677_PROOF = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC7677_SERVER_SIGNATURE = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
VERIFIER = re.compile(
    r"^SCRAM-SHA-256\$(?P<iterations>\d+):(?P<salt>[A-Za-z0-9+/=]+)"
    r"\$(?P<stored>[A-Za-z0-9+/=]+):(?P<server>[A-Za-z0-9+/=]+)$"
)


def _plugin() -> ModuleType:
    path = ANSIBLE_DIR / "roles" / "database" / "filter_plugins" / "scram.py"
    spec = importlib.util.spec_from_file_location("scrapefleet_scram_filter", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verifier_authenticates_the_rfc_7677_exchange() -> None:
    verifier = _plugin().scram_sha256_verifier("pencil", salt=RFC7677_SALT)
    match = VERIFIER.match(verifier)
    assert match and match["iterations"] == "4096" and match["salt"] == RFC7677_SALT
    stored_key = base64.b64decode(match["stored"])
    server_key = base64.b64decode(match["server"])
    # What PostgreSQL does with the stored verifier: recover ClientKey from the client's proof
    # and compare its hash with StoredKey, then sign with ServerKey.
    signature = hmac.new(stored_key, RFC7677_AUTH_MESSAGE, hashlib.sha256).digest()
    proof = base64.b64decode(RFC7677_PROOF)
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key
    server_signature = hmac.new(server_key, RFC7677_AUTH_MESSAGE, hashlib.sha256).digest()
    assert base64.b64encode(server_signature).decode() == RFC7677_SERVER_SIGNATURE


def test_each_verifier_has_its_own_salt_and_no_password() -> None:
    make = _plugin().scram_sha256_verifier
    password = "s3cret'pw%"
    first, second = make(password), make(password)
    assert first != second
    for verifier in (first, second):
        match = VERIFIER.match(verifier)
        assert match and len(base64.b64decode(match["salt"])) == 16
        assert password not in verifier and "'" not in verifier  # safe in a SQL literal


def test_saslprep_as_postgresql_applies_it() -> None:
    plugin = _plugin()
    assert plugin.saslprep("I\u00adX") == "IX"  # soft hyphen: mapped to nothing
    assert plugin.saslprep("a\u00a0b") == "a b"  # non-ASCII space: a space
    assert plugin.saslprep("\u2168") == "IX"  # NFKC
    assert plugin.saslprep("a\u0007") is None  # prohibited: the raw password is used
    make = plugin.scram_sha256_verifier
    assert make("I\u00adX", salt=RFC7677_SALT) == make("IX", salt=RFC7677_SALT)
    assert make("a\u0007", salt=RFC7677_SALT) != make("a", salt=RFC7677_SALT)


def test_filter_is_registered_under_the_name_the_role_uses() -> None:
    filters = _plugin().FilterModule().filters()
    assert "scram_sha256_verifier" in filters
    tasks = (ANSIBLE_DIR / "roles" / "database" / "tasks" / "objects.yml").read_text()
    sent = re.findall(r"PASSWORD '\{\{ (.*?) \}\}'", tasks)
    assert sent == ["scrapefleet_db_password | scram_sha256_verifier"] * 2, sent
