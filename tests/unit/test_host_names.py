"""`scrapefleet hosts add` refuses a host name the settings' rule refuses, in one line, before
anything reaches the database (the URL here leads nowhere)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scrapefleet.common.ops.cli import cli

pytestmark = pytest.mark.timeout(30)

NOWHERE = {"SCRAPEFLEET_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}


@pytest.mark.parametrize("name", ["../../x", "h1\nh2", "a" * 300, "", "h1;drop", "-h1"])
def test_a_bad_host_name_is_refused_in_one_line(name: str) -> None:
    added = CliRunner().invoke(cli, ["hosts", "add", "--", name], env=NOWHERE)
    assert added.exit_code == 2, added.output
    [line] = added.output.splitlines()
    assert line.startswith("error: host name ") and "letters, digits and '-'" in line
