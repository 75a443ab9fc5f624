"""The import contract: which part of scrapefleet may import which, no import cycles, and no
two modules of one name.

    library   scrapefleet.common (but ops/ and local/)   the migrations' location, nothing else
    producer  the library only                           (never the consumer, never the tools)
    consumer  the library and its browser                (never the producer, never the tools)
    browser   scrapefleet.consumer.browser: the library and the agent's protocol only (never
              the claim loop: the daemon drives the browser, the browser never reaches back
              into the daemon)
    agent     scrapefleet.consumer.browser.agent, a program of its own: the library, the
              stack's processes and the profile folders only (AGENT_MAY_IMPORT)
    migrations the library only
    public    scrapefleet itself (the folder api/): the library only (it re-exports common.api)
    ops, local (the tools for people) anything: they sit above both daemons

Within the library, the setting groups (scrapefleet.common.setting_groups) are put together by
scrapefleet.common.settings alone: everything else reads Settings, so a setting has one model
(the tools for people aside, which may read a group's rule), and no group imports another.

Read from the source with ast: it imports none of the modules it checks.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("common", "producer", "consumer", "migrations", "api")

ALLOWED: dict[str, set[str]] = {
    "library": {"library", "migrations"},  # `db upgrade` finds the migrations package
    "producer": {"library", "producer"},
    "consumer": {"library", "consumer", "browser", "agent"},
    "browser": {"library", "browser", "agent"},
    "agent": {"library", "agent", "browser"},
    "migrations": {"library", "migrations"},
    "public": {"library"},
    "ops": {"library", "ops", "local", "producer", "consumer", "browser", "agent"},
    "local": {"library", "ops", "local", "producer", "consumer", "browser", "agent"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "api":  # the folder of the top-level package
        parts.pop(0)
    return ".".join(["scrapefleet", *parts])


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "public"
    if parts[1] == "common":
        return parts[2] if len(parts) > 2 and parts[2] in ("ops", "local") else "library"
    if parts[1] == "consumer" and len(parts) > 2 and parts[2] == "browser":
        return "agent" if len(parts) > 3 and parts[3] == "agent" else "browser"
    return parts[1]


def _sources() -> dict[str, Path]:
    return {
        _module_name(path): path
        for folder in FOLDERS
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def _imports(path: Path, module: str, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("scrapefleet.")}


def _crossings(sources: dict[str, Path]) -> list[str]:
    broken = []
    for module, path in sorted(sources.items()):
        for imported in _imports(path, module, top_level_only=False):
            if imported != "scrapefleet" and _layer(imported) not in ALLOWED[_layer(module)]:
                broken.append(f"{path.name} ({module}) imports {imported}")
    return broken


def test_every_import_respects_the_layers() -> None:
    sources = _sources()
    assert len(sources) > 40, "the walk found the packages"
    broken = _crossings(sources)
    assert not broken, "\n".join(broken)


def test_no_import_cycles_at_module_level() -> None:
    sources = _sources()
    graph = {
        module: {
            name
            for name in _imports(path, module, top_level_only=True)
            if name in sources and name != module
        }
        for module, path in sources.items()
    }
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycle = [*visiting[visiting.index(module) :], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        visiting.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        _module_name(init) for folder in FOLDERS for init in (REPO / folder).rglob("__init__.py")
    }
    assert folders - listed == set(), "add these to [tool.setuptools] packages"


def test_the_contract_catches_a_crossing(tmp_path: Path) -> None:
    # The check itself must be able to fail: a library module importing the consumer is caught.
    bad = tmp_path / "probe.py"
    bad.write_text("from scrapefleet.consumer import runner\n")
    crossings = _crossings({**_sources(), "scrapefleet.common.probe": bad})
    assert "probe.py (scrapefleet.common.probe) imports scrapefleet.consumer.runner" in crossings


def test_the_contract_keeps_the_claim_loop_out_of_the_browser(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("from scrapefleet.consumer.serving import RunningConsumer\n")
    crossings = _crossings({**_sources(), "scrapefleet.consumer.browser.probe": bad})
    assert (
        "probe.py (scrapefleet.consumer.browser.probe) imports scrapefleet.consumer.serving"
        in crossings
    )
    assert (
        "probe.py (scrapefleet.consumer.browser.probe) imports "
        "scrapefleet.consumer.serving.RunningConsumer" in crossings
    )


SETTING_GROUPS = "scrapefleet.common.setting_groups"
SETTINGS = "scrapefleet.common.settings"


def _group_crossings(sources: dict[str, Path]) -> list[str]:
    """Imports of a setting group by anything but common.settings and the tools for people."""
    broken = []
    for module, path in sorted(sources.items()):
        if module == SETTINGS or _layer(module) in ("ops", "local"):
            continue
        for imported in sorted(_imports(path, module, top_level_only=False)):
            if imported.startswith(SETTING_GROUPS + "."):
                broken.append(f"{path.name} ({module}) imports {imported}")
    return broken


def test_only_the_settings_put_the_setting_groups_together() -> None:
    assert _group_crossings(_sources()) == []


def test_the_group_check_catches_a_reader_of_a_group(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("from scrapefleet.common.setting_groups.fleet_settings import FleetSettings\n")
    twin = tmp_path / "twin.py"
    twin.write_text("from scrapefleet.common.setting_groups import http_settings\n")
    crossings = _group_crossings(
        {
            **_sources(),
            "scrapefleet.producer.probes.local_probe": bad,
            "scrapefleet.common.setting_groups.twin_settings": twin,
        }
    )
    assert crossings == [
        "twin.py (scrapefleet.common.setting_groups.twin_settings) imports "
        "scrapefleet.common.setting_groups.http_settings",
        "probe.py (scrapefleet.producer.probes.local_probe) imports "
        "scrapefleet.common.setting_groups.fleet_settings",
        "probe.py (scrapefleet.producer.probes.local_probe) imports "
        "scrapefleet.common.setting_groups.fleet_settings.FleetSettings",
    ]


def _same_names(modules: list[str]) -> dict[str, list[str]]:
    """Module names used twice: `sessions` in two rooms reads as one thing and is two."""
    by_name: dict[str, list[str]] = {}
    for module in modules:
        name = module.rsplit(".", 1)[-1]
        # __init__ and __main__ name their package; the migrations' revisions are numbered.
        if not name.startswith("__") and ".migrations.versions." not in module:
            by_name.setdefault(name, []).append(module)
    return {name: sorted(found) for name, found in by_name.items() if len(found) > 1}


def test_no_two_modules_share_a_name() -> None:
    modules = [
        module
        for module, path in _sources().items()
        if path.name not in ("__init__.py", "__main__.py")
    ]
    assert _same_names(modules) == {}


def test_the_name_check_catches_a_twin() -> None:
    twins = [
        "scrapefleet.consumer.browser.sessions.session_pool",
        "scrapefleet.producer.session_pool",
    ]
    assert _same_names([*twins, "scrapefleet.consumer.serving"]) == {"session_pool": sorted(twins)}


AGENT = "scrapefleet.consumer.browser.agent"
# The browser agent is a program of its own, run as the browser's user beside the consumer: it
# starts and ends stacks and readies profile folders, so it needs the library, the stack's
# processes and the profile folders, never the supervisor, the session pool or the actions.
AGENT_MAY_IMPORT = (
    "scrapefleet.common",
    AGENT,
    "scrapefleet.consumer.browser.stack",
    "scrapefleet.consumer.browser.sessions.profile_sessions",
)


def _agent_crossings(sources: dict[str, Path]) -> list[str]:
    broken = []
    for module, path in sorted(sources.items()):
        if not module.startswith(AGENT + "."):
            continue
        for imported in sorted(_imports(path, module, top_level_only=False)):
            if not any(
                imported == allowed or imported.startswith(allowed + ".")
                for allowed in AGENT_MAY_IMPORT
            ):
                broken.append(f"{path.name} ({module}) imports {imported}")
    return broken


def test_the_agent_imports_only_what_it_runs() -> None:
    sources = _sources()
    assert any(module.startswith(AGENT + ".") for module in sources), "the agent was found"
    assert _agent_crossings(sources) == []


def test_the_agent_check_catches_the_supervisor_and_the_daemon(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text(
        "from scrapefleet.consumer.browser.supervisor.stack_supervisor import StackSupervisor\n"
        "from scrapefleet.consumer.serving import RunningConsumer\n"
    )
    module = f"{AGENT}.probe"
    assert _agent_crossings({**_sources(), module: bad}) == [
        f"probe.py ({module}) imports scrapefleet.consumer.browser.supervisor.stack_supervisor",
        f"probe.py ({module}) imports "
        "scrapefleet.consumer.browser.supervisor.stack_supervisor.StackSupervisor",
        f"probe.py ({module}) imports scrapefleet.consumer.serving",
        f"probe.py ({module}) imports scrapefleet.consumer.serving.RunningConsumer",
    ]
    # The layers' check refuses the agent the claim loop as well.
    assert f"probe.py ({module}) imports scrapefleet.consumer.serving" in _crossings(
        {**_sources(), module: bad}
    )
