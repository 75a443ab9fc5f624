"""Modules loaded on first use, so that a command line tool starts fast.

`scrapefleet --help` needs click and the command definitions, not SQLAlchemy, psycopg,
pydantic or the store (~0.3 s of CPU between them): the admin CLI takes those as lazy modules,
whose code runs when a command first reads an attribute of theirs.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """``name``, imported now if it already is, else at its first attribute access."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
