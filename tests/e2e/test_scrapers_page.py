"""docs/scrapers.md can be followed as written: its files are written and its commands run, in
order, in one shell, from an empty folder, so the page cannot drift from what works.

The page marks what is run with HTML comments (invisible on the site): ``<!-- run -->`` before a
block of commands (``<!-- run: exit N -->`` when the command is meant to fail so), and
``<!-- file: PATH -->`` before a file's content. Two things are the test's own: the database
URL (a throwaway database) and the website's port (a free one). The team's package is installed
into a virtualenv of the test's own, layered over this one, so that its action is not installed
beside the other tests."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.throwaway_db import throwaway_database
from tests.waiting import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "scrapers.md"
PAGE_DATABASE = "postgresql://postgres@127.0.0.1:5432/scrapers_tutorial"
PAGE_PORT = "8321"
MARKER = re.compile(r"^<!-- (run|run: exit (\d+)|file: (\S+)) -->$")
CONSOLE_SCRIPTS = {
    "scrapefleet": "scrapefleet.common.ops.cli",
    "scrapefleet-producer": "scrapefleet.producer.__main__",
    "scrapefleet-consumer": "scrapefleet.consumer.__main__",
}


@dataclass(frozen=True)
class Step:
    text: str  # the block, dedented
    path: str | None = None  # a file's path; None: commands
    exit_code: int = 0


def page_steps(page: str) -> list[Step]:
    """The marked blocks of the page, in order."""
    lines = page.splitlines()
    steps = []
    for n, line in enumerate(lines):
        marked = MARKER.match(line.strip())
        if not marked:
            continue
        block: list[str] = []
        for following in lines[n + 1 :]:
            if following.strip() and not following.startswith("    "):
                break
            if following.strip() or block:
                block.append(following)
        text = textwrap.dedent("\n".join(block)).strip("\n") + "\n"
        assert text.strip(), f"{PAGE.name}:{n + 1}: a marker with no block after it"
        steps.append(Step(text, marked.group(3), int(marked.group(2) or 0)))
    return steps


def script_of(steps: list[Step]) -> str:
    """One bash script: the files written, the commands run, each checked for its exit."""
    parts = ["set -u"]
    for n, step in enumerate(steps):
        if step.path is not None:
            continue  # written beforehand
        parts.append(f"echo '### step {n}' >&2")
        parts.append(f"( exit 0 )\n{step.text}".rstrip())
        parts.append(
            f"code=$?; [ $code -eq {step.exit_code} ] || "
            f'{{ echo "step {n} exited $code, not {step.exit_code}" >&2; exit 99; }}'
        )
    return "\n".join(parts) + "\n"


def layered_venv(where: Path) -> Path:
    """A virtualenv that sees this one's packages (scrapefleet included) but installs its own:
    the console scripts are its own too, so the daemons load what is installed in it."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=scaled(120))
    ours = Path(sys.executable).parent.parent / "lib"
    site = next(ours.glob("python3*/site-packages"))
    paths = [str(site)]
    for pth in site.glob("__editable__*.pth"):  # a strict editable install: its tree of links
        paths += [p for p in pth.read_text().splitlines() if p and not p.startswith("import")]
    theirs = next((where / "lib").glob("python3*/site-packages"))
    (theirs / "scrapefleet-tests-layer.pth").write_text("\n".join(paths) + "\n")
    for name, module in CONSOLE_SCRIPTS.items():
        script = where / "bin" / name
        script.write_text(
            f"#!{where / 'bin' / 'python'}\n"
            f"import runpy\nrunpy.run_module({module!r}, run_name='__main__')\n"
        )
        script.chmod(0o755)
    return where / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_marked_blocks_are_found() -> None:
    steps = page_steps(PAGE.read_text())
    paths = [s.path for s in steps if s.path]
    assert "team-scrapers/team_scrapers/prices.py" in paths and "prices.jsonl" in paths
    assert any("scrapefleet submit" in s.text for s in steps)
    assert any(s.exit_code == 1 for s in steps)


def test_the_scrapers_page_runs_as_written(tmp_path: Path) -> None:
    port = str(_free_port())
    page = PAGE.read_text().replace(PAGE_PORT, port)
    steps = page_steps(page)
    work = tmp_path / "work"
    work.mkdir()
    for step in steps:
        if step.path is not None:
            target = work / step.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.text)
    bin_dir = layered_venv(tmp_path / "venv")
    with throwaway_database("SCRAPEFLEET_TEST_DATABASE_URL", "scrapefleet_page") as url:
        script = script_of(steps).replace(PAGE_DATABASE, url)
        assert url in script, f"the page no longer sets {PAGE_DATABASE}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEFLEET_")}
        env |= {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(bin_dir.parent)}
        env.pop("PYTHONPATH", None)
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the page's background daemons and site: one group
        )
        try:
            out, err = shell.communicate(timeout=scaled(120))
        finally:
            # The page stops what it started; whatever it left is ended here.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(shell.pid, signal.SIGKILL)
            shell.wait(timeout=scaled(10))
        logs = "".join(
            f"\n--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(work.glob("*.log"))
        )
        assert shell.returncode == 0, out[-3000:] + err[-3000:] + logs
    assert '"price": "42.99"' in out
    assert "3 completed; 1 failed" in out, out
    assert "Permanent: no product at" in (work / "try-0" / "job.txt").read_text()
    with (work / "prices.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["payload"].split("/item/")[1].rstrip('"}') for r in rows} >= {"1", "2", "42"}, rows
