"""One build of this checkout at a time, across test processes.

setuptools builds in the source tree (build/, scrapefleet.egg-info): two builds of the checkout
at once, as two pytest-xdist workers may start them, break each other ("File exists"). Every
test that builds from the checkout holds this lock around the build.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK_FILE = REPO / "build" / ".in-tree-build.lock"


@contextlib.contextmanager
def one_build_at_a_time() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(exist_ok=True)
    with LOCK_FILE.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield
