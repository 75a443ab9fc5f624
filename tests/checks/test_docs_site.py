"""The documentation builds, strictly and offline, and says what the code does: mkdocs in strict
mode (a broken link or anchor, a page left out of the nav, a missing snippet fails), no page
that loads anything from another site, a README short enough to read whose commands and links
are real, and every `scrapefleet` command line in the docs parses as the CLI would parse it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from tools import reference

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
README = REPO / "README.md"
# The README's two commands: tests/e2e/test_demo.py runs the first, CI the second.
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' --config-settings"
    " editable_mode=strict && .venv/bin/scrapefleet demo"
)
TEST_COMMAND = "bash .ci/run"


@pytest.mark.timeout(120)
def test_site_builds_strictly_offline(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "no_proxy": "*", "NO_PROXY": "*"}
    # A proxy that refuses everything: a build that needs the network fails instead of fetching.
    env["HTTP_PROXY"] = env["HTTPS_PROXY"] = env["http_proxy"] = env["https_proxy"] = (
        "http://127.0.0.1:9"
    )
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    remote = re.compile(
        r"<(?:script|img|iframe)[^>]*\ssrc=\"(?:https?:)?//|<link[^>]*\shref=\"(?:https?:)?//"
        r"|url\((?:['\"])?(?:https?:)?//"
    )
    loads_remote = [
        str(path.relative_to(site))
        for path in site.rglob("*")
        if path.suffix in {".html", ".css"} and remote.search(path.read_text(errors="replace"))
    ]
    assert loads_remote == []


def _nav_pages(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_pages(value)


def test_every_page_is_in_the_nav_once() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = list(_nav_pages(config["nav"]))
    assert len(pages) == len(set(pages))
    on_disk = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert set(pages) == on_disk


def test_readme_is_short_and_its_commands_and_links_are_real() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    first = text.split("\n## ", 1)[0]
    assert first.startswith("# scrapefleet\n\nscrapefleet is"), "what it is, first"
    assert f"    {DEMO_COMMAND}\n" in first and f"    {TEST_COMMAND}\n" in first
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def _command_lines() -> Iterator[tuple[str, str]]:
    """(page, line) for each `scrapefleet ...` line of a code block in the docs and README."""
    for path in [README, *sorted(DOCS.rglob("*.md"))]:
        if path.parent.name == "reference" and path.name != "actions.md":
            continue  # generated from the commands themselves
        lines = path.read_text().splitlines()
        joined: list[str] = []
        for line in lines:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + line.strip()
            else:
                joined.append(line)
        fenced = False
        for line in joined:
            if line.strip().startswith("```"):
                fenced = not fenced
                continue
            if not (fenced or line.startswith("    ")):
                continue
            command = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if re.match(r"scrapefleet -{0,2}[a-z]", command):  # not a pgbouncer.ini line
                yield str(path.relative_to(REPO)), command


def _parse(group: click.Group, argv: list[str]) -> None:
    """Parse argv as `scrapefleet` would, down to the leaf command, invoking nothing."""
    command: click.Command = group
    name = "scrapefleet"
    while True:
        ctx = command.make_context(name, argv, resilient_parsing=False)
        if not isinstance(command, click.Group):
            return
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, argv = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        command = sub


def test_every_documented_command_line_parses() -> None:
    cli = reference._load(reference.CLI_COMMANDS["scrapefleet"])
    lines = list(_command_lines())
    assert len(lines) > 40
    failures = []
    for page, line in lines:
        words = shlex.split(line.split(" #", 1)[0])
        # A shell's own: a pipe, a redirect or a backgrounded daemon ends the command.
        for i, word in enumerate(words):
            if word in {"|", ">", "&", "&&", ";"}:
                words = words[:i]
                break
        try:
            _parse(cli, words[1:])
        except click.exceptions.Exit:
            pass  # --help, --version
        except click.ClickException as exc:
            message = exc.format_message()
            # An example's file that is not here: its name parsed, which is what is checked.
            if "No such file or directory" not in message and "does not exist" not in message:
                failures.append(f"{page}: {line}: {message}")
    assert failures == [], "\n".join(failures)


def test_every_repository_path_the_docs_name_exists() -> None:
    # Modules move (a package regrouped): a page that names the old path sends readers nowhere.
    named = re.compile(
        r"`((?:common|producer|consumer|migrations|tests|ansible|tools|\.ci)/[A-Za-z0-9_./-]+)`"
    )
    missing = []
    for page in [README, REPO / "CONTRIBUTING.md", REPO / "SECURITY.md", *DOCS.rglob("*.md")]:
        for match in named.finditer(page.read_text()):
            path = match[1].split("::")[0].rstrip("/")
            module = path.split(".")[0] + ".py"  # common/host_status.parse_status
            if not ((REPO / path).exists() or (REPO / module).exists()):
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert missing == []
