"""The Grid's JVM, started for as little CPU as a restart every 20 jobs allows.

A browser stack's Grid is a JVM that lives for 20 browser jobs: its start and its JIT's warm-up
are paid at every restart, and on two cores they were the largest cost of a browser page
(tests.benchmarks.bench_real_site: ~0.3 s of the JVM's CPU per page with restarts every 20,
~0.1 s without). So the Grid runs with:

- C1 only (``-XX:TieredStopAtLevel=1``): the JIT compiles quickly and never again with C2,
  which pays off only in a JVM that runs far longer than a stack does;
- the serial collector: one thread, no concurrent marking, for a heap of a few tens of MB;
- a class-data archive of its own (AppCDS): the first JVM of a host dumps the classes it
  loaded when it exits (``-XX:ArchiveClassesAtExit``), and every later one maps them instead
  of loading and verifying them again.

Measured here, one stack, the Grid's CPU until its first session answers: 3.1 s as shipped,
1.8 s with C1 and the serial collector, 1.2 s with the archive too (tests/benchmarks
/bench_real_site.py gives the per-page figures).

A JVM that maps a truncated archive dies of SIGBUS (seen here), so an archive is adopted only
once a JVM has mapped it without failing (``java -XX:SharedArchiveFile=... -version``), and an
archive in use when a Grid exits at its start is removed: the next start goes without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
ARCHIVE_CHECK_TIMEOUT_S = 30.0
PENDING_NAME = "grid-classes.jsa"  # in the stack's TMPDIR: the Grid's own user writes it


def archive_path(work_dir: Path, jar: Path) -> Path:
    """The host's archive for this jar, beside the stacks' work directories (one per jar: an
    upgrade's new jar dumps its own)."""
    return work_dir.parent / f"grid-classes-{jar.stem}.jsa"


def jvm_args(archive: Path | None, pending: Path) -> list[str]:
    """The JVM's flags: map the host's ``archive`` when there is one, else dump one at exit
    to ``pending``."""
    if archive is not None:
        return [*JVM_FLAGS, f"-XX:SharedArchiveFile={archive}"]
    return [*JVM_FLAGS, f"-XX:ArchiveClassesAtExit={pending}"]


def adopt_archive(java: Path, pending: Path, archive: Path) -> bool:
    """Keep the archive a stopped Grid dumped, if a JVM maps it without failing; True when it
    is kept. Never raises."""
    if archive.exists() or not pending.is_file():
        return False
    try:
        checked = subprocess.run(
            [str(java), *JVM_FLAGS, f"-XX:SharedArchiveFile={pending}", "-version"],
            cwd=pending.parent,  # where a JVM that dies of the archive leaves its hs_err file
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=ARCHIVE_CHECK_TIMEOUT_S,
            check=False,
        )
        if checked.returncode != 0:
            log.info("Grid class archive %s refused (java exited %d)", pending, checked.returncode)
            return False
        os.replace(pending, archive)
        archive.chmod(0o644)  # mapped by the Grid's user, which may not be ours
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("Grid class archive %s not kept: %s", pending, exc)
        return False
    return True


def forget_archive(archive: Path) -> None:
    """A Grid that mapped ``archive`` exited at its start: the next goes without it."""
    with contextlib.suppress(FileNotFoundError):
        archive.unlink()
        log.warning("removed the Grid's class archive %s after a failed start", archive)
